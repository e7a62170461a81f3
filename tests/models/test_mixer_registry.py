"""The mixer registry (hf_ssm/modeling/mixer_registry.py, docs/design.md §12): a mixer declared once is known
everywhere. A toy mixer registered from this file alone is accepted by the config (name, letter, fields), built
by the model, initialised by its hook, and keeps every model-level invariant; every declaration agrees with the
mixer it describes (cache state shape, state width, LoRA targets).
"""

from __future__ import annotations

import json

import pytest
import test_model_invariants as invariants
import torch
from torch import nn

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling import SSM_MIXER_CLASSES
from hf_ssm.modeling.mixer_registry import (
    MixerSpec,
    mixer_names,
    mixer_spec,
    pattern_letters,
    register_mixer,
    unregister_mixer,
    width_matched_fields,
)
from hf_ssm.training.lm.finetuning import lora_target_modules
from model_checks import hybrid_config, max_cached_decode_error, reload_is_bit_identical

TOY = "toy_sum"
TOL = invariants.TOL


class ToySumMixer(nn.Module):
    """Identity transition: h_t = h_{t-1} + W_in u_t (padding adds nothing), y_t = W_out (g * h_t).

    forward(hidden_states (B, T, d), state (B, D) float32 or None, mask (B, T) bool or None)
        -> (output (B, T, d), final state (B, D) float32), D = config.toy_state_size.
    """

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.state_size = config.toy_state_size
        self.in_proj = nn.Linear(config.hidden_size, self.state_size, bias=False)
        self.out_proj = nn.Linear(self.state_size, config.hidden_size, bias=False)
        self.gain = nn.Parameter(torch.full((self.state_size,), 5.0))  # the init hook sets it to 0.5

    def forward(self, hidden_states, state=None, mask=None):
        b = self.in_proj(hidden_states).float()
        if mask is not None:
            b = b * mask[..., None]
        x0 = b.new_zeros(b.shape[0], self.state_size) if state is None else state.float()
        states = x0[:, None] + b.cumsum(dim=1)
        y = self.out_proj((states * self.gain).to(hidden_states.dtype))
        return y, states[:, -1].clone()


def _check_toy(config) -> None:
    if isinstance(config.toy_state_size, bool) or not isinstance(config.toy_state_size, int):
        raise ValueError(f"`toy_state_size` must be an integer >= 1, got {config.toy_state_size!r}")
    if config.toy_state_size < 1:
        raise ValueError(f"`toy_state_size` must be an integer >= 1, got {config.toy_state_size!r}")


def _init_toy(module, init, config) -> None:
    init.constant_(module.gain, 0.5)


TOY_SPEC = MixerSpec(
    name=TOY,
    letter="Z",
    load_class=lambda: ToySumMixer,
    field_prefixes=("toy_",),
    state_shape=lambda c: (c.toy_state_size,),
    width_fields=lambda w, f: {"toy_state_size": w},
    lora_group="toy",
    lora_targets=("in_proj", "out_proj"),
    check_config=_check_toy,
    init_weights=_init_toy,
    config_fields={"toy_state_size": 6},
)


@pytest.fixture
def toy():
    """The toy mixer registered for one test, and unregistered after it (even when the test fails)."""
    register_mixer(TOY_SPEC)
    try:
        yield TOY
    finally:
        unregister_mixer(TOY)


def test_registered_mixer_is_accepted_by_the_config_by_name_letter_and_fields(toy):
    """Registering a mixer makes the config accept its name, its pattern letter and its own fields (with their
    default, a given value, a misspelt name refused with a hint, a bad value refused by its check)."""
    config = hybrid_config(toy)
    assert config.mixers == [toy, "attention"] and config.toy_state_size == 6
    assert HybridSSMConfig(num_hidden_layers=2, mixers="ZA", toy_state_size=3).mixers == [toy, "attention"]
    assert HybridSSMConfig(num_hidden_layers=1, ssm_mixer=toy, toy_state_size=3).mixers == [toy]
    with pytest.raises(ValueError, match="toy_state_size"):
        HybridSSMConfig(num_hidden_layers=1, mixers="Z", toy_state_sise=3)
    with pytest.raises(ValueError, match="`toy_state_size` must be an integer >= 1"):
        HybridSSMConfig(num_hidden_layers=1, mixers="Z", toy_state_size=0)
    with pytest.raises(ValueError, match="`toy_state_size` must be an integer >= 1"):
        config.toy_state_size = -1  # a later change is checked too, and leaves the config as it was
    assert config.toy_state_size == 6
    config.update({"toy_state_size": 4})
    assert config.toy_state_size == 4


def test_registered_mixer_fields_save_and_reload(toy, tmp_path):
    """A registered mixer's own config fields are written to config.json and read back."""
    HybridSSMConfig(num_hidden_layers=1, mixers="Z", toy_state_size=3).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["toy_state_size"] == 3
    assert HybridSSMConfig.from_pretrained(tmp_path).toy_state_size == 3


def test_unregistered_mixer_is_refused_again():
    """After unregister_mixer the name and the letter are unknown to the config again."""
    register_mixer(TOY_SPEC)
    unregister_mixer(TOY)
    assert TOY not in mixer_names() and "Z" not in pattern_letters() and TOY not in SSM_MIXER_CLASSES
    with pytest.raises(ValueError, match="not a known mixer"):
        HybridSSMConfig(num_hidden_layers=1, mixers=[TOY])
    with pytest.raises(ValueError, match="unknown letters"):
        HybridSSMConfig(num_hidden_layers=1, mixers="Z")


def test_register_refuses_a_taken_name_or_letter(toy):
    """A second mixer cannot reuse a registered name, a used or reserved letter, or another mixer's fields."""
    for changes, message in [
        (dict(letter="Y"), "already taken"),
        (dict(name="toy_two", letter="P"), "pattern letter 'P'"),
        (dict(name="toy_two", letter="S"), "pattern letter 'S'"),
        (dict(name="toy_two", letter="Y"), "belong to another registered mixer"),
        (dict(name="toy_two", letter="Y", config_fields={"other_size": 1}), "do not start with its prefixes"),
    ]:
        with pytest.raises(ValueError, match=message):
            register_mixer(MixerSpec(**{**TOY_SPEC.__dict__, **changes}))
    assert mixer_names().count(toy) == 1 and "toy_two" not in mixer_names()


def test_model_builds_a_registered_mixer_and_runs_its_init_hook(toy):
    """The model builds the registered class for its layers and `_init_weights` calls the declared hook
    (gain 0.5, not the constructor's 5.0); transformers' default init covers its nn.Linear weights."""
    model = HybridSSMForCausalLM(hybrid_config(toy))
    mixer = model.model.layers[0].mixer
    assert type(mixer) is ToySumMixer and SSM_MIXER_CLASSES[toy] is ToySumMixer
    assert torch.equal(mixer.gain, torch.full((6,), 0.5))
    assert mixer.in_proj.weight.std().item() < 0.1  # N(0, initializer_range = 0.02), not kaiming-uniform


def test_registered_mixer_cached_decode_equals_full_forward(toy):
    """Prefill + token-by-token decoding with the cache gives the full-sequence logits for the toy mixer."""
    assert max_cached_decode_error(hybrid_config(toy)) <= TOL


def test_registered_mixer_keeps_the_model_invariants(toy, tmp_path):
    """The model-invariant suite of tests/models/test_model_invariants.py, run on the toy mixer: no host read in a
    decode step, left padding = each row alone, packing = documents separately, reload bit-identical.

    Left out: loading through trust_remote_code where hf_ssm is not installed. The toy class lives in this test
    file, not in hf_ssm/modeling, so no checkpoint can carry it; a mixer added in its own module plus a
    declaration in mixer_registry.py is copied with the checkpoint and covered by that test with the built-ins."""
    invariants.test_decode_step_makes_no_host_read_in_hf_ssm(toy)
    invariants.test_left_padding_gives_each_row_its_unpadded_logits_and_state(toy)
    invariants.test_packed_documents_equal_running_them_separately(toy)
    assert reload_is_bit_identical(hybrid_config(toy), str(tmp_path))


def test_lora_groups_include_a_registered_mixer(toy):
    """`--lora_target_modules ssm` (and the mixer's own group) reaches the registered mixer's declared targets."""
    model = HybridSSMForCausalLM(hybrid_config(toy))
    expected = ["model.layers.0.mixer.in_proj", "model.layers.0.mixer.out_proj"]
    assert lora_target_modules("toy", model) == expected
    assert set(expected) <= set(lora_target_modules("ssm", model))


@pytest.mark.parametrize("name", [*mixer_names(), TOY])
def test_declared_cache_state_shape_is_the_state_the_mixer_caches(name):
    """Every declaration's state_shape / state_is_complex describe the state its mixer leaves in the cache (a complex
    state as its real (..., 2) pairs)."""
    if name == TOY:
        register_mixer(TOY_SPEC)
    try:
        config = hybrid_config(name)
        spec = mixer_spec(name)
        model = HybridSSMForCausalLM(config).eval()
        with torch.no_grad():
            state = model(torch.randint(1, 37, (3, 5)), use_cache=True).cache.layers[0].recurrent_states[0]
        pairs = (2,) if spec.state_is_complex else ()
        assert tuple(state.shape) == (3, *spec.state_shape(config), *pairs) and not state.is_complex()
        assert spec.state_width(config) == state[0].numel()
    finally:
        if name == TOY:
            unregister_mixer(TOY)


@pytest.mark.parametrize("width", [8, 10, 13])
def test_width_matched_fields_give_every_mixer_at_least_that_state_width(width):
    """width_matched_fields gives each mixer alone a state of at least `width` real numbers, and less than one
    block (or head pair) more."""
    for name in mixer_names():
        fields = {"pd_ssm_num_heads": 1, "lru_group_size": 4}
        config = hybrid_config(name, **{**fields, **width_matched_fields([name], width, fields)})
        got = mixer_spec(name).state_width(config)
        assert width <= got < width + 4, (name, got)


def test_width_matched_fields_share_a_family_field_by_its_largest_value():
    """bd_lru and diag_lru share lru_total_state_size / lru_group_size: the block size bd_lru needs and the state
    rounded up to whole blocks win, so both get at least the width."""
    fields = width_matched_fields(["diag_lru", "bd_lru", "attention"], 10, {"lru_group_size": 4})
    assert fields == {"lru_group_size": 4, "lru_total_state_size": 12}
    assert width_matched_fields(["diag_lru"], 10, {"lru_group_size": 4}) == {
        "lru_group_size": 1,
        "lru_total_state_size": 10,
    }
