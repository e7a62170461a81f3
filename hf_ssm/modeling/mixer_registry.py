"""The mixer registry: one declaration per SSM mixer, read by everything else (docs/design.md §12).

A `MixerSpec` holds every fact about a mixer that code outside the mixer's own module needs: its name in
`config.mixers`, its pattern letter, the prefixes of its config fields, its class, the shape of its cached state
(and from it the state width in real numbers), the config fields that give it a state of a chosen width, its LoRA
targets, the checks of its config fields and its initialisation hooks. The config (names, letters, field
prefixes, field checks), the model (construction, `_init_weights`, the post-norm block's skip) and the training
code (state-width matching, LoRA groups) all read it here.

This module imports neither torch nor a mixer module when it is imported: the config imports it, and the mixer
modules import the config. A mixer's class is loaded on first use by the small `_load_*` functions below; their
relative imports are also what `save_pretrained` follows to copy the mixer modules next to the weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from .experimental_fields import EXPERIMENTAL_DEFAULTS

ATTENTION = "attention"
# Letters with a fixed meaning in a `mixers` pattern: A attention, S the config's `ssm_mixer`.
RESERVED_LETTERS = {"A": ATTENTION, "S": "ssm_mixer"}


@dataclass(frozen=True)
class MixerSpec:
    """Everything outside a mixer's module needs to know about it.

    The class takes (config, layer_idx) and implements
        forward(hidden_states (B, T, d), state=None, mask=None) -> (output (B, T, d), final_state)
    with `state` its fixed-size recurrent state (None: its initial state) and `mask` (B, T) bool marking real
    tokens (a masked-out step leaves the state unchanged).

    Fields:
        name: the mixer's name in `config.mixers` ("pd_ssm").
        letter: its one-letter code in a `mixers` pattern string (not "A" or "S").
        load_class: returns the mixer class (imports its module on first use).
        field_prefixes: the prefixes of the config fields it reads ("lru_"); a misspelt keyword with one of them
            is refused by the config.
        state_shape: config -> the shape of one sequence's recurrent state (without the batch axis).
        state_is_complex: the state is complex (each entry counts as two real numbers in `state_width`); the
            model's cache holds such a state as its real (*state_shape, 2) pairs (docs/design.md §7.3).
        width_fields: (width, fields) -> the config fields that give the mixer a state of at least `width` real
            numbers, rounded up to its layout; `fields` are the other config fields chosen so far (heads, block
            size). Where mixers of one model share a field, the largest value asked for wins (width_matched_fields).
        lora_group: the name of its group of LoRA targets (`--lora_target_modules`), shared by a family.
        lora_targets: the nn.Linear modules of the mixer that LoRA adapts (names inside the mixer).
        check_config: config -> None, raising ValueError for a bad value of one of its fields; run whenever a
            layer uses the mixer.
        init_weights: (module, init, config) -> None: initialises the mixer's own parameters (those that are not
            nn.Linear / norms, which transformers' default init covers); `init` is transformers.initialization,
            whose functions skip weights loaded from a checkpoint. Called after the default init of the module.
        part_inits: returns {class: hook} for sub-modules of the mixer that need their own init when
            transformers visits them (children before parents), e.g. PD-SSM's head-wise MLPs.
        output_has_skip: the mixer adds its own D_skip * u (parameter `skip`, (d,)) to its output, so the
            post-norm block uses it instead of a skip of its own.
        config_fields: {field: default} of config fields HybridSSMConfig does not declare itself (a mixer
            registered outside this file); the config accepts, checks, saves and reloads them.
    """

    name: str
    letter: str
    load_class: Callable[[], type]
    field_prefixes: tuple[str, ...]
    state_shape: Callable[[object], tuple[int, ...]]
    width_fields: Callable[[int, Mapping], dict]
    lora_group: str
    lora_targets: tuple[str, ...]
    state_is_complex: bool = False
    check_config: Callable[[object], None] | None = None
    init_weights: Callable | None = None
    part_inits: Callable[[], Mapping[type, Callable]] | None = None
    output_has_skip: bool = False
    config_fields: Mapping[str, object] = field(default_factory=dict)

    def state_width(self, config) -> int:
        """Real numbers in one sequence's recurrent state (a complex entry counts twice)."""
        return math.prod(self.state_shape(config)) * (2 if self.state_is_complex else 1)


_REGISTRY: dict[str, MixerSpec] = {}
_CLASSES: dict[str, type] = {}  # name -> loaded class
_INIT_HOOKS: dict[type, Callable] = {}  # class (mixer or part) -> init hook, filled as classes load


def register_mixer(spec: MixerSpec) -> MixerSpec:
    """Add `spec` to the registry; ValueError for a name, letter or config field that is already taken."""
    if not spec.name or spec.name == ATTENTION or spec.name in _REGISTRY:
        raise ValueError(f"mixer name {spec.name!r} is already taken (registered: {list(_REGISTRY)})")
    letters = {**RESERVED_LETTERS, **{s.letter: s.name for s in _REGISTRY.values()}}
    if len(spec.letter) != 1 or not spec.letter.isalpha() or not spec.letter.isupper() or spec.letter in letters:
        raise ValueError(
            f"mixer {spec.name!r}: pattern letter {spec.letter!r} must be one upper-case letter not in use "
            f"(in use: {letters})"
        )
    taken = {f for s in _REGISTRY.values() for f in s.config_fields}
    clash = sorted(taken.intersection(spec.config_fields))
    if clash:
        raise ValueError(f"mixer {spec.name!r}: config fields {clash} belong to another registered mixer")
    bad = [f for f in spec.config_fields if not f.startswith(spec.field_prefixes)]
    if bad:
        raise ValueError(
            f"mixer {spec.name!r}: config fields {bad} do not start with its prefixes {spec.field_prefixes}"
        )
    _REGISTRY[spec.name] = spec
    return spec


def unregister_mixer(name: str) -> None:
    """Remove mixer `name` from the registry (for a mixer registered at run time, e.g. by a test)."""
    spec = mixer_spec(name)
    del _REGISTRY[name]
    cls = _CLASSES.pop(name, None)
    _INIT_HOOKS.pop(cls, None)
    if spec.part_inits is not None and cls is not None:
        for part in spec.part_inits():
            _INIT_HOOKS.pop(part, None)


def mixer_spec(name: str) -> MixerSpec:
    """The declaration of mixer `name`; ValueError naming the registered mixers for an unknown name."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown SSM mixer {name!r}; registered mixers: {list(_REGISTRY)}")
    return _REGISTRY[name]


def mixer_names() -> tuple[str, ...]:
    """Every registered SSM mixer, in registration order."""
    return tuple(_REGISTRY)


def pattern_letters() -> dict[str, str]:
    """Pattern letter -> mixer name for "A" (attention) and every registered mixer ("S" is the config's)."""
    return {"A": ATTENTION, **{spec.letter: spec.name for spec in _REGISTRY.values()}}


def field_prefixes() -> tuple[str, ...]:
    """The config field prefixes of every registered mixer (a misspelt keyword with one of them is refused)."""
    return tuple(dict.fromkeys(p for spec in _REGISTRY.values() for p in spec.field_prefixes))


def registered_config_fields() -> dict[str, object]:
    """{field: default} of the config fields that registered mixers add to HybridSSMConfig."""
    return {name: default for spec in _REGISTRY.values() for name, default in spec.config_fields.items()}


def mixer_class(name: str) -> type:
    """The class of mixer `name`, loaded (and its init hooks recorded) on first use."""
    cls = _CLASSES.get(name)
    if cls is None:
        spec = mixer_spec(name)
        cls = _CLASSES[name] = spec.load_class()
        if spec.init_weights is not None:
            _INIT_HOOKS[cls] = spec.init_weights
        if spec.part_inits is not None:
            _INIT_HOOKS.update(spec.part_inits())
    return cls


def init_hook(module) -> Callable | None:
    """The init hook of a mixer or mixer part `module` (exact class match), or None."""
    return _INIT_HOOKS.get(type(module))


def width_matched_fields(mixers, width: int, fields: Mapping) -> dict:
    """The config fields that give each SSM mixer in `mixers` a state of at least `width` real numbers.

    `fields` are the config fields chosen so far (e.g. heads, block size). Mixers of one family share their
    fields; where two ask for different values of one field, the larger wins, so each gets at least `width`.
    """
    out: dict = {}
    for name in dict.fromkeys(m for m in mixers if m != ATTENTION):
        for key, value in mixer_spec(name).width_fields(width, fields).items():  # each sees the given fields only
            out[key] = max(out[key], value) if key in out else value
    return out


class MixerClasses(Mapping):
    """Read-only, live view of the registry as {mixer name: class} (`SSM_MIXER_CLASSES`)."""

    def __getitem__(self, name: str) -> type:
        if name not in _REGISTRY:
            raise KeyError(name)
        return mixer_class(name)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return f"MixerClasses({list(_REGISTRY)})"


SSM_MIXER_CLASSES = MixerClasses()


# ------------------------------------------------------------------------------------------ built-in mixers
# Each built-in mixer's declaration. Their stable config fields are declared (and documented) in HybridSSMConfig;
# pd_ssm's experimental ones (experimental_fields.py) are its `config_fields`. The checks import the config's
# helpers when they run (the config imports this module, so importing it here at the top would be a cycle).


def _load_pd_ssm():
    from .mixer_pd_ssm import PDSSMMixer

    return PDSSMMixer


def _load_lru(name: str):
    from .mixer_lru import BlockDiagonalLRUMixer, DiagonalLRUMixer, HigherOrderLRUMixer

    return {"bd_lru": BlockDiagonalLRUMixer, "h_lru": HigherOrderLRUMixer, "diag_lru": DiagonalLRUMixer}[name]


def _load_lrc(name: str):
    from .mixer_lrc import LRC_MIXER_CLASSES

    return LRC_MIXER_CLASSES[name]


def _load_lstm():
    from .mixer_lstm import LSTMMixer

    return LSTMMixer


def _check_pd_ssm(config) -> None:
    from .config_values import (
        PD_SSM_DIAGONALS,
        PD_SSM_INITIAL_STATES,
        PD_SSM_INPUTS,
        PD_SSM_OUTPUT_INITS,
        check_choice,
        check_number,
        check_positive_int,
    )

    # the transition modes' one list and their capability flags (imported here, when a config is checked: the
    # module imports the PD ops, which this module and the config do not import when they are imported)
    from .pd_transitions import transition_class, transition_names

    mode = transition_class(config.pd_ssm_transition)  # the layer's kind first: ValueError naming the modes
    for name in ("pd_ssm_num_heads", "pd_ssm_head_state_size", "pd_ssm_dict_size", "pd_ssm_mlp_width"):
        check_positive_int(name, getattr(config, name))
    check_choice("pd_ssm_diagonal", config.pd_ssm_diagonal, PD_SSM_DIAGONALS)
    check_choice("pd_ssm_initial_state", config.pd_ssm_initial_state, PD_SSM_INITIAL_STATES)
    check_choice("pd_ssm_input", config.pd_ssm_input, PD_SSM_INPUTS)
    if config.pd_ssm_input == "none" and config.pd_ssm_initial_state == "zeros":
        raise ValueError(
            "`pd_ssm_input='none'` needs a non-zero start state: with `pd_ssm_initial_state='zeros'` the state would "
            f"stay 0; choose pd_ssm_initial_state from {[s for s in PD_SSM_INITIAL_STATES if s != 'zeros']}"
        )
    if not config.pd_ssm_temperature > 0:
        raise ValueError(f"`pd_ssm_temperature` must be > 0, got {config.pd_ssm_temperature!r}")
    for name in ("pd_ssm_magnitude_bias_init", "pd_ssm_phase_bias_init", "pd_ssm_dictionary_diagonal_init"):
        check_number(name, getattr(config, name))
    check_choice("pd_ssm_output_init", config.pd_ssm_output_init, PD_SSM_OUTPUT_INITS)
    features = 2 * config.pd_ssm_num_heads * config.pd_ssm_head_state_size
    if config.pd_ssm_output_init == "identity" and config.hidden_size < features:
        raise ValueError(
            f"`pd_ssm_output_init='identity'` needs hidden_size >= 2 * pd_ssm_num_heads * pd_ssm_head_state_size = "
            f"{features} (C maps the heads' [Re x, Im x] to width d), got hidden_size={config.hidden_size}"
        )
    for name in ("pd_ssm_output_skip", "pd_ssm_output_trainable", "pd_ssm_transition_norm", "pd_ssm_shared_selection"):
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"`{name}` must be True or False, got {getattr(config, name)!r}")
    check_number("pd_ssm_transition_init_scale", config.pd_ssm_transition_init_scale, low=0, low_open=True)
    check_number("pd_ssm_output_init_scale", config.pd_ssm_output_init_scale, low=0, low_open=True)
    lr_scale = config.pd_ssm_transition_lr_scale  # None: 1 / sqrt(W_P's input size) where there is a W_P
    if lr_scale is not None:
        check_number("pd_ssm_transition_lr_scale", lr_scale, low=0, low_open=True)
    if lr_scale is not None and lr_scale != 1 and not mode.has_projection:
        raise ValueError(
            "`pd_ssm_transition_lr_scale` scales the learning rate of the direct transition's W_P: it needs "
            f"pd_ssm_transition={_choices(transition_names('has_projection'))} (got {config.pd_ssm_transition!r}; "
            "leave it None or 1.0)"
        )
    k_in = config.pd_ssm_transition_input_size
    if k_in is not None:
        if isinstance(k_in, bool) or not isinstance(k_in, int) or not 1 <= k_in <= config.hidden_size:
            raise ValueError(
                f"`pd_ssm_transition_input_size` must be None (all hidden_size features) or an int in [1, hidden_size "
                f"= {config.hidden_size}], got {k_in!r}"
            )
        if not mode.has_projection:
            raise ValueError(
                "`pd_ssm_transition_input_size` sizes the direct transition's W_P: it needs "
                f"pd_ssm_transition={_choices(transition_names('has_projection'))} (got "
                f"{config.pd_ssm_transition!r}; leave it None)"
            )
    if config.pd_ssm_shared_selection and not mode.can_share_selection:
        raise ValueError(
            "`pd_ssm_shared_selection` shares the choice of a bank entry across heads: it needs "
            f"pd_ssm_transition={_choices(transition_names('can_share_selection'))} (got "
            f"{config.pd_ssm_transition!r}; set it to False)"
        )
    if config.pd_ssm_identity_entry_logit is not None:
        check_number("pd_ssm_identity_entry_logit", config.pd_ssm_identity_entry_logit)
        if not mode.has_dictionary:
            raise ValueError(
                "`pd_ssm_identity_entry_logit` needs a dictionary or bank to hold the identity entry; "
                f"pd_ssm_transition={config.pd_ssm_transition!r} has none (set it to None, or pd_ssm_transition to "
                f"{_choices(transition_names('has_dictionary'))})"
            )


def _choices(values) -> str:
    """'a' / 'b': the accepted values, as an error message names them."""
    return " / ".join(map(repr, values))


def _init_pd_ssm(module, init, config) -> None:
    """The layer's own init (PDSSMMixer.init_parameters: its transition mode's parameters, the learned x_0, D_skip,
    an identity C), through transformers' guarded init functions, which skip weights loaded from a checkpoint."""
    module.init_parameters(init)


def _init_headwise_mlp(module, init, config) -> None:
    init.normal_(module.down_weight, mean=0.0, std=config.initializer_range)
    init.constant_(module.down_bias, module.bias_init)


def _pd_ssm_parts():
    from .mixer_pd_ssm import HeadwiseMLP

    return {HeadwiseMLP: _init_headwise_mlp}


def _check_lru(config, blocked: bool) -> None:
    from .config_values import LRU_NORMALIZATIONS, check_choice, check_positive_int

    check_positive_int("lru_total_state_size", config.lru_total_state_size)
    check_positive_int("lru_group_size", config.lru_group_size)
    check_choice("lru_normalization", config.lru_normalization, LRU_NORMALIZATIONS)
    if blocked and config.lru_total_state_size % config.lru_group_size:
        raise ValueError(
            f"`lru_total_state_size` ({config.lru_total_state_size}) must be divisible by `lru_group_size` "
            f"({config.lru_group_size}): the state is split into lru_total_state_size / lru_group_size groups"
        )


def _check_lrc(config) -> None:
    from .config_values import LRC_SOLVERS, check_choice, check_number, check_positive_int

    check_positive_int("lrc_num_channels", config.lrc_num_channels)
    check_positive_int("deer_max_iter", config.deer_max_iter)
    if not isinstance(config.lrc_input_term, bool):
        raise ValueError(f"`lrc_input_term` must be True or False, got {config.lrc_input_term!r}")
    check_choice("lrc_solver", config.lrc_solver, LRC_SOLVERS)
    check_number("deer_tol", config.deer_tol, low=0)
    check_number("deer_damping", config.deer_damping, low=0, high=1, low_open=True)
    check_number("deer_max_growth", config.deer_max_growth, low=1, low_open=True)


def _init_lrc(module, init, config) -> None:
    module.reset_cell_parameters(init)  # cell gains, leak terms and gate biases (mixer_lrc.py)


def _check_lstm(config) -> None:
    from .config_values import check_positive_int

    check_positive_int("lstm_hidden_size", config.lstm_hidden_size)


def _init_lstm(module, init, config) -> None:
    """PyTorch's own LSTM init, U(-1/sqrt(H), 1/sqrt(H)), for W_ih, W_hh and b_hh; b_ih is 0 except the forget gate's
    1 (the usual choice: the cell keeps its memory at the start). Through transformers' guarded init functions,
    which skip weights loaded from a checkpoint."""
    import torch

    bound = module.hidden_size**-0.5
    for param in module.lstm.parameters():
        init.uniform_(param, -bound, bound)
    bias = torch.zeros_like(module.lstm.bias_ih_l0)
    bias[module.hidden_size : 2 * module.hidden_size] = 1.0  # gate order i, f, g, o
    init.copy_(module.lstm.bias_ih_l0, bias)


def _blocked_lru_width(width: int, fields: Mapping) -> dict:
    m = fields.get("lru_group_size", 4)
    return {"lru_group_size": m, "lru_total_state_size": -(-width // m) * m}


register_mixer(
    MixerSpec(
        name="pd_ssm",
        letter="P",
        load_class=_load_pd_ssm,
        field_prefixes=("pd_ssm_",),
        state_shape=lambda c: (c.pd_ssm_num_heads, c.pd_ssm_head_state_size),
        state_is_complex=True,
        width_fields=lambda w, f: {"pd_ssm_head_state_size": -(-w // (2 * f.get("pd_ssm_num_heads", 1)))},
        lora_group="pd_ssm",
        lora_targets=("selection", "transition_proj", "magnitude.up", "phase.up", "in_proj", "out_proj"),
        check_config=_check_pd_ssm,
        init_weights=_init_pd_ssm,
        part_inits=_pd_ssm_parts,
        output_has_skip=True,
        config_fields=EXPERIMENTAL_DEFAULTS,
    )
)
for _name, _letter in (("lrc_ssm", "L"), ("gru_ssm", "G"), ("mgu_ssm", "M"), ("lstm_ssm", "R")):
    register_mixer(
        MixerSpec(
            name=_name,
            letter=_letter,
            load_class=lambda n=_name: _load_lrc(n),
            field_prefixes=("lrc_", "deer_"),
            # the LSTM keeps (c, h) per channel, planar
            state_shape=(lambda c: (2, c.lrc_num_channels))
            if _name == "lstm_ssm"
            else (lambda c: (c.lrc_num_channels,)),
            width_fields=(lambda w, f: {"lrc_num_channels": -(-w // 2)})
            if _name == "lstm_ssm"
            else (lambda w, f: {"lrc_num_channels": w}),
            lora_group="lrc",
            lora_targets=("in_proj", "out_proj"),
            check_config=_check_lrc,
            init_weights=_init_lrc,
        )
    )
for _name, _letter in (("bd_lru", "B"), ("h_lru", "H"), ("diag_lru", "D")):
    register_mixer(
        MixerSpec(
            name=_name,
            letter=_letter,
            load_class=lambda n=_name: _load_lru(n),
            field_prefixes=("lru_",),
            # (N, m): N = lru_total_state_size / m groups of m; diag_lru is BD-LRU with m = 1 (ignores lru_group_size)
            state_shape=(lambda c: (c.lru_total_state_size, 1))
            if _name == "diag_lru"
            else (lambda c: (c.lru_total_state_size // c.lru_group_size, c.lru_group_size)),
            width_fields=(lambda w, f: {"lru_group_size": 1, "lru_total_state_size": w})
            if _name == "diag_lru"
            else _blocked_lru_width,
            lora_group="lru",
            lora_targets=("in_proj", "gate_proj", "out_proj"),
            check_config=lambda c, blocked=_name != "diag_lru": _check_lru(c, blocked),
        )
    )
del _name, _letter
# The true LSTM baseline: one sequential torch.nn.LSTM layer with dense recurrent matrices (mixer_lstm.py), not
# lstm_ssm above (diagonal recurrent matrices, solved in parallel by DEER). Letter T: the L, S and M of "LSTM" are
# taken (lrc_ssm, the config's ssm_mixer, mgu_ssm).
register_mixer(
    MixerSpec(
        name="lstm",
        letter="T",
        load_class=_load_lstm,
        field_prefixes=("lstm_",),
        state_shape=lambda c: (2, c.lstm_hidden_size),  # stack(h, c)
        width_fields=lambda w, f: {"lstm_hidden_size": -(-w // 2)},
        lora_group="lstm",
        lora_targets=("out_proj",),  # nn.LSTM's own matrices are not nn.Linear modules
        check_config=_check_lstm,
        init_weights=_init_lstm,
    )
)

__all__ = [
    "SSM_MIXER_CLASSES",
    "MixerSpec",
    "field_prefixes",
    "init_hook",
    "mixer_class",
    "mixer_names",
    "mixer_spec",
    "pattern_letters",
    "register_mixer",
    "registered_config_fields",
    "unregister_mixer",
    "width_matched_fields",
]
