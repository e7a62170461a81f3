"""Data generators for hf_ssm experiments."""

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

__all__ = [
    "TASK_NAMES",
    "CycleNavigationTask",
    "EvenPairsTask",
    "ModularArithmeticBracketsTask",
    "ModularArithmeticTask",
    "ParityTask",
    "PermutationGroupTask",
    "StateTrackingDataset",
    "Task",
    "TimeSeriesData",
    "collate_state_tracking",
    "get_task",
    "load_timeseries",
    "parse_ts",
    "to_hf_dataset",
]
