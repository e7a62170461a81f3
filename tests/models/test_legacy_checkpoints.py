"""Checkpoints saved before the renamings of hf_ssm/modeling/legacy_names.py (docs/design.md §9.1) still load, and a
removed config field in an old config.json loads at its former default or is refused by name.

tests/fixtures/legacy_checkpoints holds one tiny checkpoint of every mixer (and two SSM adapters) saved by commit
e22e70f, before the renaming, with the logits they gave then (tests/fixtures/make_legacy_checkpoints.py). Each
must load with the current code, warn about every old name it uses, and give those logits within a few float32 ulps
(STORED_LOGITS_ATOL): stored floating-point numbers are never compared bit for bit, since another CPU, even one
reporting the same torch cpu_capability, rounds their last bits differently.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.adapters import SSMAdapterConfig, load_ssm_adapter
from hf_ssm.model_card import mixer_details
from hf_ssm.modeling.configuration_hybrid_ssm import SSM_MIXERS, check_config_keys
from hf_ssm.modeling.legacy_names import (
    REMOVED_CONFIG_FIELDS,
    RENAMED_CONFIG_FIELDS,
    RENAMED_PARAMETERS,
    rename_legacy_keys,
)
from model_checks import assert_loads_without_hf_ssm, tiny_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "legacy_checkpoints"
MODELS = sorted(p.name for p in FIXTURES.iterdir() if (p / "model.safetensors").is_file())
ADAPTERS = sorted(p.name for p in FIXTURES.iterdir() if (p / "adapter").is_dir())


# Mixers added after the commit that saved the fixtures: no checkpoint of theirs can hold the old names.
MIXERS_AFTER_THE_RENAMING = {"lstm"}


def _reference(directory: Path):
    ref = json.loads((directory / "reference.json").read_text())
    inputs = {"input_ids": torch.tensor(ref["input_ids"]), "attention_mask": torch.tensor(ref["attention_mask"])}
    return inputs, torch.tensor(ref["logits"], dtype=torch.float32)


# The stored logits were computed on the CPU that made the fixtures. Vectorised float32 kernels (exp, reductions,
# matmul blocking) round the last bit differently on another CPU: on an AMD EPYC (torch 2.13, one thread) the
# fixtures differ from them by up to 3.0e-8 under AVX-512 and AVX2 and 4.5e-8 under ATEN_CPU_CAPABILITY=default
# (one or two float32 ulps at these magnitudes; .ci/run runs this file under all three). A weight loaded into the
# wrong place or left at its init moves the logits by ~1e-2, so 1e-6 separates the two by four orders of magnitude.
STORED_LOGITS_ATOL = 1e-6


def _assert_stored_logits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """The logits equal the stored ones within STORED_LOGITS_ATOL (a few float32 ulps), on any CPU."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=STORED_LOGITS_ATOL)


def _future_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, FutureWarning)]


def _load_recording(load):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = load()
    return result, _future_warnings(record)


def _config(mixers: str, **fields) -> HybridSSMConfig:
    return HybridSSMConfig(
        vocab_size=37, hidden_size=16, intermediate_size=32, num_hidden_layers=len(mixers), num_attention_heads=2,
        mixers=mixers, **fields,
    )  # fmt: skip


def _old_keys(keys) -> list[str]:
    return [k for k in keys if any(f"mixer.{old}." in k for old in RENAMED_PARAMETERS)]


def test_fixtures_cover_every_built_in_mixer_and_use_the_old_names():
    """One legacy checkpoint per built-in mixer (attention inside a hybrid), saved under the old names: the
    config fields of legacy_names.RENAMED_CONFIG_FIELDS and, for pd_ssm / the LRU family, the old parameter names."""
    covered = set()
    for name in MODELS:
        config = json.loads((FIXTURES / name / "config.json").read_text())
        covered.update(config["mixers"])
        assert set(RENAMED_CONFIG_FIELDS) <= set(config), name
        assert not set(RENAMED_CONFIG_FIELDS.values()) & set(config), name
        if {"pd_ssm", "bd_lru", "h_lru", "diag_lru"} & set(config["mixers"]):
            assert _old_keys(load_file(str(FIXTURES / name / "model.safetensors"))), name
    assert covered == {"attention", *SSM_MIXERS} - MIXERS_AFTER_THE_RENAMING
    assert {"pd_ssm", "bd_lru"} <= {
        json.loads((FIXTURES / a / "adapter" / "adapter_config.json").read_text())["mixer"] for a in ADAPTERS
    }
    assert {"pd_ssm_dictionary", "pd_ssm_bank"} <= set(MODELS)  # both PD-SSM transition modes


@pytest.mark.parametrize("name", MODELS)
def test_legacy_checkpoint_loads_bit_identically_with_future_warnings(name):
    """from_pretrained on a checkpoint saved before the renaming: no missing or unexpected weight, every weight
    equal to the saved tensor (under its new name), logits equal to the stored reference (_assert_stored_logits), and a
    FutureWarning naming each old config field and the renamed parameters."""
    directory = FIXTURES / name
    (model, info), messages = _load_recording(
        lambda: HybridSSMForCausalLM.from_pretrained(directory, output_loading_info=True)
    )
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    for old, new in RENAMED_CONFIG_FIELDS.items():
        assert any(f"`{old}` is now `{new}`" in m for m in messages), (old, messages)
    saved = load_file(str(directory / "model.safetensors"))
    if _old_keys(saved):
        assert any("names mixer parameters as before their renaming" in m for m in messages), messages
    state = model.state_dict()
    renamed = _load_recording(lambda: rename_legacy_keys(saved))[0]
    assert set(renamed) == set(state)
    assert all(torch.equal(state[k], v) for k, v in renamed.items())
    inputs, expected = _reference(directory)
    with torch.no_grad():
        _assert_stored_logits(model.eval()(**inputs).logits, expected)


@pytest.mark.parametrize("name", ["pd_ssm_dictionary", "bd_lru", "hybrid_attention"])
def test_legacy_checkpoint_saved_again_uses_new_names_and_reloads_without_warnings(name, tmp_path):
    """A legacy checkpoint saved again writes the current config fields and parameter names (transformers would
    otherwise write the layout it loaded), and loads from there, through AutoModelForCausalLM too, without a
    FutureWarning and with the same logits."""
    model = _load_recording(lambda: HybridSSMForCausalLM.from_pretrained(FIXTURES / name))[0].eval()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert not set(RENAMED_CONFIG_FIELDS) & set(config)
    assert set(RENAMED_CONFIG_FIELDS.values()) <= set(config)
    assert not _old_keys(load_file(str(tmp_path / "model.safetensors")))
    reloaded, messages = _load_recording(lambda: AutoModelForCausalLM.from_pretrained(tmp_path))
    assert messages == []
    inputs, expected = _reference(FIXTURES / name)
    with torch.no_grad():
        logits = reloaded.eval()(**inputs).logits
        assert torch.equal(logits, model(**inputs).logits)  # same machine: bit for bit
    _assert_stored_logits(logits, expected)


@pytest.mark.parametrize("name", ADAPTERS)
def test_legacy_ssm_adapter_loads_and_reproduces_the_stored_logits(name):
    """An SSM adapter saved before the renaming (old `mixer_settings` names, old parameter names) attaches to
    its base with FutureWarnings and reproduces the stored logits (_assert_stored_logits); its config holds the new
    names."""
    directory = FIXTURES / name
    base = AutoModelForCausalLM.from_pretrained(directory / "base").eval()
    adapted, messages = _load_recording(lambda: load_ssm_adapter(base, directory / "adapter"))
    saved = json.loads((directory / "adapter" / "adapter_config.json").read_text())["mixer_settings"]
    for old in saved:
        if old in RENAMED_CONFIG_FIELDS:
            assert any(f"`{old}` is now `{RENAMED_CONFIG_FIELDS[old]}`" in m for m in messages), (old, messages)
            assert RENAMED_CONFIG_FIELDS[old] in adapted.adapter_config.mixer_settings
    assert any("parameter names from before their renaming" in m for m in messages), messages
    inputs, expected = _reference(directory)
    with torch.no_grad():
        _assert_stored_logits(adapted(**inputs).logits, expected)


# (old field, value, mixers that read it, other fields)
OLD_FIELDS = [
    ("pd_ssm_state_size", 3, "P", {}),
    ("lru_state_size", 12, "BH", {"lru_group_size": 3}),
    ("lru_block_size", 3, "BH", {"lru_total_state_size": 12}),
    ("lrc_state_size", 5, "LR", {}),
]


@pytest.mark.parametrize(("old", "value", "mixers", "others"), OLD_FIELDS)
def test_old_field_name_builds_the_same_model_as_the_new_one(old, value, mixers, others):
    """HybridSSMConfig(old=v) warns, naming the new field, sets the new field to v, saves only the new name and
    builds exactly the model HybridSSMConfig(new=v) builds (same parameter names, shapes, values and logits)."""
    new = RENAMED_CONFIG_FIELDS[old]
    with pytest.warns(FutureWarning, match=f"`{old}` is now `{new}`"):
        old_config = _config(mixers, **others, **{old: value})
    new_config = _config(mixers, **others, **{new: value})
    assert getattr(old_config, new) == value and old_config.to_dict() == new_config.to_dict()
    assert old not in old_config.to_dict()
    models = []
    for config in (old_config, new_config):
        torch.manual_seed(0)
        models.append(HybridSSMForCausalLM(config).eval())
    old_state, new_state = (m.state_dict() for m in models)
    assert list(old_state) == list(new_state) and all(torch.equal(old_state[k], new_state[k]) for k in old_state)
    ids = torch.randint(1, 37, (2, 9))
    with torch.no_grad():
        assert torch.equal(models[0](ids).logits, models[1](ids).logits)


def test_old_field_names_work_wherever_a_field_name_does(tmp_path):
    """Attribute reads and writes, update(), from_pretrained keyword overrides and --override / --config keys take
    the old names (each with a FutureWarning) and act on the new field."""
    config = _config("B", lru_total_state_size=8, lru_group_size=2)
    with pytest.warns(FutureWarning, match="`lru_state_size` is now `lru_total_state_size`"):
        assert config.lru_state_size == 8
    with pytest.warns(FutureWarning, match="`lru_block_size` is now `lru_group_size`"):
        config.lru_block_size = 4
    assert config.lru_group_size == 4
    with pytest.warns(FutureWarning, match="`lru_state_size`"):
        config.update({"lru_state_size": 12, "lru_group_size": 3})
    assert (config.lru_total_state_size, config.lru_group_size) == (12, 3)
    config.save_pretrained(tmp_path)
    with pytest.warns(FutureWarning, match="`lrc_state_size` is now `lrc_num_channels`"):
        loaded = HybridSSMConfig.from_pretrained(tmp_path, lrc_state_size=7)
    assert loaded.lrc_num_channels == 7
    check_config_keys(["pd_ssm_state_size", "lru_block_size"], "--override")  # accepted, not "not a field"
    with pytest.raises(ValueError, match="is not a HybridSSMConfig field"):
        check_config_keys(["lru_blok_size"], "--override")


def test_old_and_new_name_with_different_values_raise():
    """A field given under both names with different values is refused with both names; the same value is fine."""
    with pytest.raises(ValueError, match="`lru_state_size`.*`lru_total_state_size`"), pytest.warns(FutureWarning):
        _config("B", lru_state_size=8, lru_total_state_size=16)
    with pytest.warns(FutureWarning):
        config = _config("B", lru_state_size=16, lru_total_state_size=16)
    assert config.lru_total_state_size == 16
    with pytest.raises(ValueError, match="`pd_ssm_state_size`.*`pd_ssm_head_state_size`"), pytest.warns(FutureWarning):
        SSMAdapterConfig(mixer_settings={"pd_ssm_state_size": 4, "pd_ssm_head_state_size": 8})


@pytest.mark.parametrize(
    ("name", "mixer", "described"),
    [("pd_ssm_bank", "pd_ssm", "2 head(s) x state 4 (complex)"), ("bd_lru", "bd_lru", "state 8 in blocks of 2"),
     ("h_lru", "h_lru", "order 2 over 4 channels"), ("lstm_ssm", "lstm_ssm", "state 6,")],
)  # fmt: skip
def test_model_card_describes_a_legacy_config_json(name, mixer, described):
    """The model card reads a legacy config.json (a plain dict) under the old field names."""
    assert described in mixer_details(json.loads((FIXTURES / name / "config.json").read_text()), mixer)


def test_resume_reads_a_setting_recorded_under_its_old_name(tmp_path):
    """A state-tracking run recorded with `lru_block_size` (the option's old name) resumes with the same value of
    `lru_group_size` and is refused with another, instead of comparing against the default."""
    from hf_ssm.training.checkpointing import check_resumed_settings
    from hf_ssm.training.state_tracking.settings import StateTrackingSettings

    recorded = {"mixer": "bd_lru", "lru_block_size": 8}
    check_resumed_settings(StateTrackingSettings(mixer="bd_lru", lru_group_size=8), recorded, (), tmp_path)
    with pytest.raises(ValueError, match="lru_group_size 8 -> 4"):
        check_resumed_settings(StateTrackingSettings(mixer="bd_lru"), recorded, (), tmp_path)


def test_rename_legacy_keys_renames_only_the_old_mixer_parameters():
    """rename_legacy_keys maps mixer.<old>. to mixer.<new>. (any prefix), leaves every other key alone (the MLP's
    gate_proj, attention's o_proj, the adapter's own out_proj) and keeps the tensors."""
    t = torch.zeros(1)
    keys = {
        "model.layers.0.mixer.input_proj.weight": "model.layers.0.mixer.in_proj.weight",
        "model.layers.1.mixer.value_proj.weight": "model.layers.1.mixer.in_proj.weight",
        "ssm_adapter.mixer.output_proj.weight": "ssm_adapter.mixer.out_proj.weight",
        "model.layers.1.mlp.gate_proj.weight": "model.layers.1.mlp.gate_proj.weight",
        "model.layers.2.mixer.o_proj.weight": "model.layers.2.mixer.o_proj.weight",
        "ssm_adapter.out_proj.weight": "ssm_adapter.out_proj.weight",
        "model.layers.3.mixer.in_proj.weight": "model.layers.3.mixer.in_proj.weight",
    }
    with pytest.warns(FutureWarning, match="before their renaming"):
        renamed = rename_legacy_keys(dict.fromkeys(keys, t))
    assert list(renamed) == list(keys.values()) and all(v is t for v in renamed.values())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rename_legacy_keys({"model.layers.3.mixer.in_proj.weight": t})  # nothing old: no warning


def test_fresh_save_with_renamed_mixers_loads_through_remote_code(tmp_path):
    """A model with the renamed mixers, saved now, loads through trust_remote_code where hf_ssm cannot be imported
    (legacy_names.py travels with the modeling code) and gives identical logits."""
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(tiny_config("PBA", lru_total_state_size=8, lru_group_size=2))
    files = assert_loads_without_hf_ssm(model, tmp_path / "model")
    assert "legacy_names.py" in files


REMOVED = {"pd_ssm_retired_option": (False, "drop it from config.json; the layer now always does X")}


def _config_json_with(tmp_path: Path, **fields) -> Path:
    """A copy of the pd_ssm_dictionary fixture's config.json (a real old config) with `fields` added."""
    saved = json.loads((FIXTURES / "pd_ssm_dictionary" / "config.json").read_text())
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**saved, **fields}))
    return folder


# The fixture's config.json also holds renamed fields, whose own warnings are tested above.
@pytest.mark.filterwarnings("ignore:HybridSSMConfig. the config field .* is now:FutureWarning")
def test_a_removed_field_at_its_former_default_loads_with_a_warning_naming_it(tmp_path, monkeypatch):
    """An old config.json holding a removed field at its former default loads (the field changed nothing there),
    with a FutureWarning naming the field; the config no longer carries it, so a config saved again leaves it out."""
    for name, entry in REMOVED.items():
        monkeypatch.setitem(REMOVED_CONFIG_FIELDS, name, entry)
    folder = _config_json_with(tmp_path, pd_ssm_retired_option=False)
    with pytest.warns(FutureWarning, match="`pd_ssm_retired_option` was removed"):
        config = HybridSSMConfig.from_pretrained(folder)
    assert not hasattr(config, "pd_ssm_retired_option")
    config.save_pretrained(tmp_path / "again")
    assert "pd_ssm_retired_option" not in json.loads((tmp_path / "again" / "config.json").read_text())


@pytest.mark.parametrize("value", [True, 0, None])
def test_a_removed_field_at_another_value_is_refused_naming_it_and_what_to_do(value, tmp_path, monkeypatch):
    """A removed field set to anything but its former default (also an equal value of another type, 0 for False)
    would build a layer that no longer exists: loading, building and updating all raise a ValueError naming the
    field, the value and the advice, and nothing is dropped silently."""
    for name, entry in REMOVED.items():
        monkeypatch.setitem(REMOVED_CONFIG_FIELDS, name, entry)
    folder = _config_json_with(tmp_path, pd_ssm_retired_option=value)
    for build in (
        lambda: HybridSSMConfig.from_pretrained(folder),
        lambda: HybridSSMConfig(pd_ssm_retired_option=value),
        lambda: HybridSSMConfig.from_pretrained(folder.parent / "old", pd_ssm_retired_option=value),
        lambda: HybridSSMConfig().update({"pd_ssm_retired_option": value}),
    ):
        with pytest.raises(ValueError, match="`pd_ssm_retired_option` was removed") as err:
            build()
        assert repr(value) in str(err.value) and "the layer now always does X" in str(err.value)
