"""Crash-safe checkpoint folders: an interrupted save never replaces a good checkpoint."""

from __future__ import annotations

import pytest

from hf_ssm.training.checkpointing import atomic_save_dir, is_complete, latest_checkpoint, prune_checkpoints


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
