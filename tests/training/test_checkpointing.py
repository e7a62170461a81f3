"""Crash-safe checkpoint folders: an interrupted save never replaces a good checkpoint."""

from __future__ import annotations

import dataclasses

import pytest

from hf_ssm.training.checkpointing import (
    COMPLETE_MARKER,
    atomic_save_dir,
    check_resumed_settings,
    check_run_folder_arguments,
    is_complete,
    latest_checkpoint,
    prune_checkpoints,
)


def write_files(content: str, fail: bool = False):
    def write(tmp):
        (tmp / "weights.bin").write_text(content)
        if fail:
            raise KeyboardInterrupt("killed during save")
        (tmp / "optimizer.bin").write_text(content)

    return write


def test_interrupted_save_keeps_previous_checkpoint(tmp_path):
    target = tmp_path / "ckpt" / "step_10"
    atomic_save_dir(target, write_files("good"), {"step": 10})
    with pytest.raises(KeyboardInterrupt):
        atomic_save_dir(target, write_files("new", fail=True), {"step": 10})
    assert (target / "weights.bin").read_text() == "good"
    assert (target / "optimizer.bin").read_text() == "good"
    assert is_complete(target)
    assert [p.name for p in target.parent.iterdir()] == ["step_10"]  # no half-written folder left behind


def test_latest_checkpoint_ignores_incomplete_folders(tmp_path):
    atomic_save_dir(tmp_path / "step_2", write_files("a"), {"step": 2})
    atomic_save_dir(tmp_path / "step_4", write_files("b"), {"step": 4})
    (tmp_path / "step_6").mkdir()  # e.g. a save killed by SIGKILL before the rename: no completion marker
    (tmp_path / "step_6" / "weights.bin").write_text("partial")
    assert latest_checkpoint(tmp_path).name == "step_4"
    prune_checkpoints(tmp_path, keep=1)
    assert latest_checkpoint(tmp_path).name == "step_4"
    assert not (tmp_path / "step_2").exists()


def test_an_exported_model_folder_gets_no_checkpoint_marker(tmp_path):
    """atomic_save_dir without metadata (model/, adapter/) writes exactly what `write` wrote: no stray
    checkpoint_complete.json next to the weights."""
    atomic_save_dir(tmp_path / "model", write_files("w"))
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["optimizer.bin", "weights.bin"]
    assert COMPLETE_MARKER == "checkpoint_complete.json"


def test_a_fresh_run_never_starts_in_a_folder_with_checkpoints_at_any_depth(tmp_path):
    """Suites and restarts keep their checkpoints in sub-folders (<run>/seed_0/checkpoints): a run without --resume
    in that folder is refused, as for a top-level checkpoints/ folder."""
    check_run_folder_arguments(resume=False, output_dir=str(tmp_path))  # empty: fine
    atomic_save_dir(tmp_path / "parity_pd_ssm" / "seed_0" / "checkpoints" / "step_2", write_files("a"), {"step": 2})
    with pytest.raises(ValueError, match="holds checkpoints of an earlier run: pass --resume"):
        check_run_folder_arguments(resume=False, output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="--resume needs --output_dir"):
        check_run_folder_arguments(resume=True, output_dir=None)


@dataclasses.dataclass
class _Settings:
    learning_rate: float = 0.1
    eval_every: int = 5
    added_later: str = "x"


def test_resumed_settings_are_compared_field_by_field_apart_from_the_safe_ones(tmp_path):
    """Every changed field is named with its old and new value; safe fields may change; a field missing from the
    recorded settings (a run from before the field existed) counts as its default."""
    recorded = {"learning_rate": 0.1, "eval_every": 5}
    check_resumed_settings(_Settings(eval_every=7), recorded, {"eval_every"}, tmp_path)
    with pytest.raises(ValueError, match="learning_rate 0.1 -> 0.2; added_later 'x' -> 'y'"):
        check_resumed_settings(_Settings(learning_rate=0.2, added_later="y"), recorded, {"eval_every"}, tmp_path)
