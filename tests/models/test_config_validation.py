"""HybridSSMConfig validation holds however a config is built or changed (points 11 and 12).

Construction, attribute assignment, `update`, and `from_pretrained(path, **overrides)` all end in a config whose
derived fields (`mixers` resolved from a pattern, `layer_types`) match, or in a ValueError / TypeError that names
the field and what it accepts; a failed change leaves the config as it was.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from hf_ssm.modeling import PAPER_PD_SSM_LAYER, HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.configuration_hybrid_ssm import check_config_keys, config_field_names

TINY = {  # PD-SSM: the paper's layer, whose dictionary a bank override would reinterpret
    **PAPER_PD_SSM_LAYER,
    "vocab_size": 32,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "pd_ssm_head_state_size": 4,
    "pd_ssm_dict_size": 4,
}


def tiny_config(**overrides) -> HybridSSMConfig:
    return HybridSSMConfig(**{**TINY, **overrides})


@pytest.fixture
def saved_ssm_model(tmp_path):
    torch.manual_seed(0)
    HybridSSMForCausalLM(tiny_config(mixers="SS")).save_pretrained(tmp_path)
    return tmp_path


# ---------------------------------------------------------------------------------------------------------------
# Point 11: derived fields follow every change
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:loading with `mixers`")
def test_from_pretrained_with_a_mixers_pattern_rebuilds_mixers_and_layer_types(saved_ssm_model):
    """`from_pretrained(path, mixers="AS")` (a KeyError 'A' before) resolves the pattern and re-derives layer_types,
    for the config class, AutoConfig and the model."""
    allow = {"allow_weight_meaning_change": True}  # a new layer stack for saved weights is a deliberate choice
    for config in (
        HybridSSMConfig.from_pretrained(saved_ssm_model, mixers="AS", **allow),
        AutoConfig.from_pretrained(saved_ssm_model, mixers="AS", **allow),
    ):
        assert config.mixers == ["attention", "pd_ssm"]
        assert config.layer_types == ["full_attention", "linear_attention"]
    model = AutoModelForCausalLM.from_pretrained(saved_ssm_model, mixers="AS", **allow)
    assert model.config.mixers == ["attention", "pd_ssm"]
    assert type(model.model.layers[0].mixer).__name__ == "HybridSSMAttention"
    assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 32)


def test_assigning_mixers_updates_layer_types_and_the_cache_follows():
    """`config.mixers = [...]` re-derives layer_types (stale before), so a cached generate runs on the new layers."""
    config = tiny_config(mixers="SS")
    config.mixers = ["attention", "pd_ssm"]
    assert config.layer_types == ["full_attention", "linear_attention"]
    config.mixers = "SA"  # a pattern is resolved like at construction
    assert config.mixers == ["pd_ssm", "attention"] and config.layer_types == ["linear_attention", "full_attention"]
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(config).eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    cached = model.generate(ids, max_new_tokens=4, do_sample=False)  # DynamicCache(config=...) reads layer_types
    full = model.generate(ids, max_new_tokens=4, do_sample=False, use_cache=False)
    assert torch.equal(cached, full)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("mixers", "SAS", "`mixers` names 3 layers but `num_hidden_layers` is 2"),
        ("mixers", "SX", "unknown letters \\['X'\\]"),
        ("mixers", ["attention", "mamba"], "`mixers\\[1\\]` = 'mamba'"),
        ("num_hidden_layers", 3, "`mixers` names 2 layers but `num_hidden_layers` is 3"),
        ("ssm_mixer", "nonsense", "`ssm_mixer` must be one of"),
        ("ssm_mixer", "bd_lru", "give `mixers` in the same change"),
        ("pd_ssm_head_state_size", -3, "`pd_ssm_head_state_size` must be an integer >= 1"),
        ("hidden_size", "32", "`hidden_size` must be an integer >= 1"),
        ("layer_types", ["full_attention", "full_attention"], "`layer_types` is derived from `mixers`"),
    ],
)
def test_a_bad_assignment_raises_naming_the_field_and_leaves_the_config_unchanged(field, value, message):
    config = tiny_config(mixers="SA")
    before = config.to_dict()
    with pytest.raises((ValueError, TypeError), match=message):
        setattr(config, field, value)
    assert config.to_dict() == before


def test_fields_of_an_unused_mixer_are_checked_once_a_layer_uses_it():
    """A pure-attention config does not look at pd_ssm_ fields, but switching a layer to pd_ssm validates them."""
    config = tiny_config(mixers="AA", pd_ssm_head_state_size=-3)
    with pytest.raises(ValueError, match="`pd_ssm_head_state_size` must be an integer >= 1, got -3"):
        config.mixers = "PA"
    assert config.mixers == ["attention", "attention"]


def test_update_changes_dependent_fields_together():
    """`update` applies several fields at once, then validates: layers and pattern can change together."""
    config = tiny_config(mixers="SA")
    config.update({"num_hidden_layers": 3, "ssm_mixer": "bd_lru", "mixers": "SAP", "lru_total_state_size": 8})
    assert config.mixers == ["bd_lru", "attention", "pd_ssm"]
    assert config.layer_types == ["linear_attention", "full_attention", "linear_attention"]
    with pytest.raises(ValueError, match="lru_group_size"):  # 10 is not a multiple of lru_group_size 4
        config.update({"lru_total_state_size": 10})
    assert config.lru_total_state_size == 8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(ssm_mixer="nonsense"), "`ssm_mixer` must be one of"),
        (dict(pd_ssm_head_state_size=-3), "`pd_ssm_head_state_size` must be an integer >= 1"),
        (dict(pd_ssm_stat_size=4), "did you mean `pd_ssm_head_state_size`"),
        (dict(num_hidden_layers=3), "`mixers` names 2 layers"),
    ],
)
def test_from_pretrained_overrides_are_validated(saved_ssm_model, overrides, message):
    """Keyword overrides of a saved config are checked like constructor arguments (accepted silently before)."""
    with pytest.raises(ValueError, match=message):
        HybridSSMConfig.from_pretrained(saved_ssm_model, **overrides)


@pytest.mark.filterwarnings("ignore:loading with `mixers`")
def test_a_config_json_as_saved_by_earlier_versions_loads_and_takes_overrides(tmp_path):
    """A checkpoint config with transformers' bookkeeping keys and derived fields (as hf_ssm has always saved it)
    loads, unknown keys without a mixer prefix stay PretrainedConfig extras, and an override re-derives."""
    saved = {
        **TINY,
        "architectures": ["HybridSSMForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_hybrid_ssm.HybridSSMConfig"},
        "model_type": "hybrid_ssm",
        "transformers_version": "5.24.0",
        "dtype": "float32",
        "mixers": ["pd_ssm", "attention"],
        "layer_types": ["linear_attention", "full_attention"],
        "head_dim": 8,
        "pd_ssm_mlp_width": 8,
        "some_future_extra": 1,
    }
    (tmp_path / "config.json").write_text(json.dumps(saved))
    config = AutoConfig.from_pretrained(tmp_path)
    assert config.mixers == ["pd_ssm", "attention"] and config.some_future_extra == 1
    # the saved layer_types give way to the new mixers
    changed = AutoConfig.from_pretrained(tmp_path, mixers="AA", allow_weight_meaning_change=True)
    assert changed.layer_types == ["full_attention", "full_attention"]


# ---------------------------------------------------------------------------------------------------------------
# Point 12: each value checked, misspelt fields refused with the closest valid name
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(num_attention_heads=0), "`num_attention_heads` must be an integer >= 1"),  # ZeroDivisionError before
        (dict(hidden_size="32"), "`hidden_size` must be an integer >= 1, got '32'"),  # TypeError deep inside before
        (dict(pad_token_id=999, vocab_size=64), "`pad_token_id` must be None or a token id in \\[0, "),
        (dict(eos_token_id=[1, 64], vocab_size=64), "`eos_token_id` must be None or a token id"),
        (dict(hidden_size=24, num_attention_heads=5, mixers="SA"), "`hidden_size` \\(24\\) must be divisible by"),
        (dict(rms_norm_eps=-1), "`rms_norm_eps` must be a finite number > 0"),
        (dict(attention_dropout=2.0), "`attention_dropout` must be a finite number >= 0 and < 1"),
        (dict(initializer_range=float("nan")), "`initializer_range` must be a finite number"),
        (dict(use_cache="yes"), "`use_cache` must be True or False"),
        (dict(hidden_act="swishy"), "`hidden_act` must be one of"),
        (dict(pd_ssm_stat_size=4), "`pd_ssm_stat_size` is not a HybridSSMConfig field; did you mean "),
        (dict(pd_ssm_diagnal="unit"), "did you mean `pd_ssm_diagonal`"),
        (dict(lru_blok_size=2), "did you mean `lru_group_size`"),
        (dict(deer_maxiter=3), "did you mean `deer_max_iter`"),
        (dict(lrc_zzz=3), "its fields with this prefix: \\['lrc_input_term'"),
    ],
)
def test_bad_config_values_raise_naming_the_field_and_the_accepted_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_the_divisibility_rule_is_for_the_derived_head_dim_only():
    """hidden_size % num_attention_heads is refused when head_dim is derived from it (silently floored before),
    accepted with an explicit head_dim; an int is a valid value of a float field."""
    with pytest.raises(ValueError, match="or give `head_dim` explicitly"):
        tiny_config(hidden_size=24, num_attention_heads=5, mixers="SA")
    config = tiny_config(hidden_size=24, num_attention_heads=5, head_dim=4, mixers="SA", rms_norm_eps=1)
    assert config.head_dim == 4


def test_field_names_come_from_the_class_so_new_fields_are_accepted():
    """The accepted names are the dataclass fields: a subclass's new field passes both checks, a misspelling of it
    is refused, and unknown keys without a mixer prefix (transformers passes many) stay extras."""

    class Extended(HybridSSMConfig):
        pd_ssm_new_option: str = "x"

    assert Extended(**TINY, pd_ssm_new_option="y", foo=1).foo == 1
    with pytest.raises(ValueError, match="did you mean `pd_ssm_new_option`"):
        Extended(**TINY, pd_ssm_new_optoin="y")
    check_config_keys(["pd_ssm_new_option"], config_class=Extended)
    assert "pd_ssm_head_state_size" in config_field_names()


@pytest.mark.parametrize(
    ("key", "closest"), [("hiden_size", "hidden_size"), ("pd_ssm_diagnal", "pd_ssm_diagonal"), ("mixer", "mixers")]
)
def test_unknown_override_keys_are_refused_with_the_closest_valid_name(key, closest):
    with pytest.raises(
        ValueError, match=f"--override: '{key}' is not a HybridSSMConfig field; did you mean `{closest}`"
    ):
        check_config_keys({key: 1}, "--override")
    check_config_keys({"hidden_size": 1, "num_labels": 3, "id2label": {}}, "--override")  # valid keys pass


# ---------------------------------------------------------------------------------------------------------------
# misspelt fields outside the mixer prefixes, through every way of setting a key
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "closest"),
    [("block_typ", "block_type"), ("hiden_size", "hidden_size"), ("num_hiden_layers", "num_hidden_layers"),
     ("vocab_sise", "vocab_size"), ("mixer", "mixers")],
)  # fmt: skip
def test_a_typo_of_a_field_is_refused_however_it_is_set(key, closest, tmp_path):
    """Keyword, update, from_pretrained override, a key of a loaded config.json and attribute assignment all refuse
    a key within a small edit distance of a field, naming it (before: kept as an ignored extra attribute)."""
    message = f"`{key}` is not a HybridSSMConfig field; did you mean `{closest}`"
    with pytest.raises(ValueError, match=message):
        tiny_config(**{key: 1})
    config = tiny_config()
    with pytest.raises(ValueError, match=message):
        config.update({key: 1})
    with pytest.raises(ValueError, match=message):
        setattr(config, key, 1)
    assert not hasattr(config, key) and config.to_dict() == tiny_config().to_dict()
    config.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=message):
        AutoConfig.from_pretrained(tmp_path, **{key: 1})
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, key: 1}))
    with pytest.raises(ValueError, match=message):
        AutoConfig.from_pretrained(tmp_path)


def test_a_mixer_field_typo_is_refused_on_assignment_too():
    """`config.pd_ssm_stat_size = 4` is refused as `update({...})` and the keyword already were."""
    config = tiny_config()
    with pytest.raises(ValueError, match="`pd_ssm_stat_size` is not a HybridSSMConfig field; did you mean"):
        config.pd_ssm_stat_size = 4


def test_extra_keys_transformers_sets_and_distant_unknown_keys_still_pass(tmp_path):
    """The rule leaves transformers' own extras and keys far from every field alone: a saved model reloads with
    its `architectures` / `auto_map`, generate works, and an unrelated extra key is kept as an attribute."""
    config = tiny_config(mixers="PA", my_experiment_tag="run-7")
    config.architectures = ["HybridSSMForCausalLM"]
    config.dataset_note = "synthetic"
    model = HybridSSMForCausalLM(config)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.config.my_experiment_tag == "run-7" and loaded.config.dataset_note == "synthetic"
    assert loaded.config.architectures == ["HybridSSMForCausalLM"]
    loaded.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, do_sample=False)


# ---------------------------------------------------------------------------------------------------------------
# an override that changes what the saved weights compute is refused unless asked for
# ---------------------------------------------------------------------------------------------------------------


def test_a_dictionary_checkpoint_does_not_load_silently_as_a_bank_model(tmp_path):
    """`from_pretrained(dictionary_ckpt, pd_ssm_transition="bank")` loaded every weight without a word (same names
    and shapes, another function); now it is refused naming the field and both values, unless
    allow_weight_meaning_change=True, which warns. Overrides to the saved value or of settings that do not change
    the function (scan_backend) still load quietly."""
    HybridSSMForCausalLM(tiny_config(mixers="PA")).save_pretrained(tmp_path)
    message = "`pd_ssm_transition` 'dictionary' -> 'bank' changes what the saved weights compute"
    with pytest.raises(ValueError, match=message):
        AutoModelForCausalLM.from_pretrained(tmp_path, pd_ssm_transition="bank")
    with pytest.raises(ValueError, match="`block_type` 'pre_norm_residual' -> 'post_norm_mixer'"):
        AutoConfig.from_pretrained(tmp_path, block_type="post_norm_mixer")
    with pytest.warns(UserWarning, match="the saved weights now compute something else"):
        model = AutoModelForCausalLM.from_pretrained(
            tmp_path, pd_ssm_transition="bank", allow_weight_meaning_change=True
        )
    assert model.config.pd_ssm_transition == "bank" and not hasattr(model.config, "allow_weight_meaning_change")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        same = AutoModelForCausalLM.from_pretrained(tmp_path, pd_ssm_transition="dictionary", scan_backend="torch")
    assert same.config.scan_backend == "torch"
    with pytest.raises(TypeError, match="`allow_weight_meaning_change` must be True or False"):
        AutoConfig.from_pretrained(tmp_path, allow_weight_meaning_change="yes")


def test_experimental_fields_sit_in_one_table_outside_the_stable_fields_and_work_like_fields(tmp_path):
    """The experimental fields (experimental_fields.py) are not HybridSSMConfig dataclass fields, yet every path that
    takes a field takes them: the constructor, check_config_keys (--extra_config), an adapter's mixer_settings,
    save / reload; the config docstring names each of them, and each has a default and a description."""
    from hf_ssm.adapters import SSMAdapterConfig
    from hf_ssm.modeling.experimental_fields import EXPERIMENTAL_FIELDS

    stable = set(HybridSSMConfig.__dataclass_fields__)
    assert EXPERIMENTAL_FIELDS and not stable & set(EXPERIMENTAL_FIELDS)
    check_config_keys(EXPERIMENTAL_FIELDS, "--extra_config")
    assert set(EXPERIMENTAL_FIELDS) <= set(config_field_names())
    for name, (default, description) in EXPERIMENTAL_FIELDS.items():
        assert f"`{name}`" in HybridSSMConfig.__doc__ and description
        assert getattr(HybridSSMConfig(**TINY), name) == default
    config = tiny_config(pd_ssm_transition="bank", pd_ssm_shared_selection=True)
    config.save_pretrained(tmp_path)
    assert HybridSSMConfig.from_pretrained(tmp_path).pd_ssm_shared_selection is True
    adapter = SSMAdapterConfig(mixer_settings={"pd_ssm_transition": "bank", "pd_ssm_shared_selection": True})
    assert adapter.mixer_settings["pd_ssm_shared_selection"] is True
