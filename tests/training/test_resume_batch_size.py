"""What docs/training.md says about resuming a causal-LM run: a changed batch size or accumulation is refused
(naming the setting, before the run folder changes), and only the settings of RESUME_SAFE_SETTINGS may change."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hf_ssm.training.checkpointing import atomic_save_dir, check_resume, check_run_folder_arguments
from hf_ssm.training.lm.finetuning import FinetuneSettings
from hf_ssm.training.lm.lm_settings import RESUME_SAFE_SETTINGS, PretrainSettings


def _run_with_checkpoint(run_dir, settings) -> None:
    """A run folder as training leaves it: settings.json and one complete checkpoint whose metadata records them."""
    recorded = dataclasses.asdict(settings)
    run_dir.mkdir()
    (run_dir / "settings.json").write_text(json.dumps(recorded))
    atomic_save_dir(run_dir / "checkpoints" / "step_2", lambda tmp: None, metadata={"step": 2, "settings": recorded})


@pytest.mark.parametrize("settings_class", [PretrainSettings, FinetuneSettings])
@pytest.mark.parametrize(("field", "value"), [("batch_size", 4), ("gradient_accumulation_steps", 3)])
def test_a_resume_with_another_batch_size_is_refused_naming_it(tmp_path, settings_class, field, value):
    """Pretraining and fine-tuning (`check_resume`, and the scripts' `check_run_folder_arguments`) refuse a resume
    whose batch size or accumulation differs from the run's, naming the setting and both values, and leave
    settings.json as it was; a setting of RESUME_SAFE_SETTINGS (eval_every) may change."""
    assert field not in RESUME_SAFE_SETTINGS
    run = tmp_path / "run"
    original = settings_class(batch_size=2, gradient_accumulation_steps=1)
    _run_with_checkpoint(run, original)
    before = (run / "settings.json").read_text()
    changed = dataclasses.replace(original, **{field: value})
    message = rf"--resume: settings differ .*{field} {getattr(original, field)} -> {value}"
    with pytest.raises(ValueError, match=message):
        check_resume(changed, run, RESUME_SAFE_SETTINGS)
    with pytest.raises(ValueError, match=message):
        check_run_folder_arguments(True, str(run), changed, RESUME_SAFE_SETTINGS)
    assert (run / "settings.json").read_text() == before
    safe_change = dataclasses.replace(original, eval_every=original.eval_every + 1)
    assert check_resume(safe_change, run, RESUME_SAFE_SETTINGS).name == "step_2"
