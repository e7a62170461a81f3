"""Data generators for hf_ssm experiments."""

from .memory_tasks import CompressionTask, MultiQueryAssociativeRecallTask, SelectiveCopyingTask
from .nl_state_tracking import (
    ALL_NL_TASK_NAMES,
    NL_TASK_NAMES,
    NLStateTrackingDataset,
    NLStateTrackingTask,
    collate_nl_state_tracking,
    get_nl_task,
)
from .state_tracking import (
    TASK_NAMES,
    CycleNavigationTask,
    EvenPairsTask,
    ModularArithmeticBracketsTask,
    ModularArithmeticTask,
    ParityTask,
    PermutationGroupTask,
    StateTrackingDataset,
    Task,
    collate_state_tracking,
    get_task,
    to_hf_dataset,
)
from .timeseries import TimeSeriesData, load_timeseries, parse_ts
from .word_problems import WordProblemDataset, load_word_problem_file

__all__ = [
    "ALL_NL_TASK_NAMES",
    "NL_TASK_NAMES",
    "NLStateTrackingDataset",
    "NLStateTrackingTask",
    "TASK_NAMES",
    "CompressionTask",
    "CycleNavigationTask",
    "EvenPairsTask",
    "ModularArithmeticBracketsTask",
    "ModularArithmeticTask",
    "MultiQueryAssociativeRecallTask",
    "ParityTask",
    "PermutationGroupTask",
    "SelectiveCopyingTask",
    "StateTrackingDataset",
    "Task",
    "TimeSeriesData",
    "WordProblemDataset",
    "collate_nl_state_tracking",
    "collate_state_tracking",
    "get_nl_task",
    "get_task",
    "load_timeseries",
    "load_word_problem_file",
    "parse_ts",
    "to_hf_dataset",
]
