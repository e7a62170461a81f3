"""Configuration of the hybrid attention / state-space model (docs/design.md §7)."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import warnings

from transformers import PretrainedConfig
from transformers.activations import ACT2FN
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, RopeParameters

from .config_values import (
    BLOCK_TYPES,
    CLASSIFIER_POOLING,
    PROBLEM_TYPES,
    SCAN_BACKENDS,
    _is_number,
    check_choice,
    check_number,
    check_positive_int,
)
from .legacy_names import RENAMED_CONFIG_FIELDS, drop_removed_fields, rename_config_fields, warn_renamed_field
from .mixer_registry import (
    ATTENTION,
    field_prefixes,
    mixer_names,
    mixer_spec,
    pattern_letters,
    registered_config_fields,
)
from .portable import write_portable_code

# Every SSM mixer's name, pattern letter, field prefixes and field checks come from its declaration in
# mixer_registry.py (docs/design.md §12); this module reads them there, when it validates.
# SSM_MIXERS / PATTERN_LETTERS: the mixers registered when this module was imported (for scripts' help texts);
# use mixer_names() / pattern_letters() for the live registry, which also holds mixers registered at run time.
SSM_MIXERS = mixer_names()
PATTERN_LETTERS = pattern_letters()
# Fields whose value decides what the saved weights compute, often with the same parameter names and shapes (a
# dictionary PD-SSM checkpoint loads cleanly as a bank one): from_pretrained refuses an override of any of them that
# differs from the checkpoint's value unless `allow_weight_meaning_change=True` is passed (HybridSSMConfig.from_dict).
WEIGHT_MEANING_FIELDS = (
    "mixers",
    "block_type",
    "hidden_act",
    "pd_ssm_transition",
    "pd_ssm_diagonal",
    "pd_ssm_input",
    "pd_ssm_initial_state",
    "pd_ssm_output_skip",
    "pd_ssm_identity_entry_logit",
    "pd_ssm_transition_norm",
    "pd_ssm_shared_selection",
    "lru_normalization",
    "lrc_input_term",
    "classifier_pooling",
)
ALLOW_WEIGHT_MEANING_CHANGE = "allow_weight_meaning_change"
# The paper's PD-SSM layer (docs/design.md §4), the config's PD-SSM defaults until the state tracker of §8.8 took
# their place: a dictionary of K matrices mixed per token, complex D, b_t = B u_t, x_0 = 0, D_skip u_t added to the
# output, C trained, one head of N = 16. `HybridSSMConfig(**PAPER_PD_SSM_LAYER, ...)` builds it (the language-model
# presets, the adapters and the state-tracking recipes start from it). A saved config.json lacks a field only if it
# was saved before the field existed, when the field's default was this value: `from_dict` loads it so.
PAPER_PD_SSM_LAYER = {
    "pd_ssm_num_heads": 1,
    "pd_ssm_head_state_size": 16,
    "pd_ssm_transition": "dictionary",
    "pd_ssm_diagonal": "complex",
    "pd_ssm_initial_state": "zeros",
    "pd_ssm_input": "projection",
    "pd_ssm_output_skip": True,
    "pd_ssm_output_trainable": True,
    "pd_ssm_transition_lr_scale": 1.0,
}
# A key every saved config.json carries (PretrainedConfig.to_dict), and a hand-written dict of fields does not.
SAVED_CONFIG_KEY = "transformers_version"

# Cache layer type of each mixer kind, as transformers' DynamicCache(config=...) understands them:
# attention keeps keys/values, an SSM layer only its recurrent state.
ATTENTION_LAYER_TYPE = "full_attention"
SSM_LAYER_TYPE = "linear_attention"

# transformers' top-level names of rope_parameters keys (Llama / Qwen2 configs take them as keywords): given to the
# constructor, `update`, `from_pretrained(path, rope_theta=...)` or set as `config.rope_theta = ...`, each changes
# that key of rope_parameters; neither is ever kept as an attribute of its own, which nothing would read.
ROPE_THETA = "rope_theta"
ROPE_KEYWORDS = (ROPE_THETA, "partial_rotary_factor")
# transformers' old name of rope_parameters (a property of PretrainedConfig that sets it).
ROPE_SCALING = "rope_scaling"
# The RoPE types HybridSSMRotaryEmbedding computes: its own default one and every one of transformers' table.
ROPE_TYPES = ("default", *ROPE_INIT_FUNCTIONS)


def _closest(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def config_field_names(config_class=None) -> list[str]:
    """Every field a config class accepts (its own, PretrainedConfig's and those registered mixers add, the
    experimental ones included), sorted; default HybridSSMConfig."""
    declared = (f.name for f in dataclasses.fields(config_class or HybridSSMConfig))
    return sorted({*declared, *registered_config_fields()})


def check_config_keys(keys, source: str = "config", config_class=None) -> None:
    """ValueError unless every key is a declared field of the config class (default HybridSSMConfig).

    For option values that can only mean config fields (`--override KEY=VALUE`, a `--config` JSON object): a
    misspelt key is refused with the closest valid name instead of becoming an ignored PretrainedConfig extra.
    """
    valid = config_field_names(config_class)
    # num_labels: PretrainedConfig's property that sets id2label; an old field name maps to its new one (FutureWarning)
    accepted = {*valid, "num_labels", *ROPE_KEYWORDS, *RENAMED_CONFIG_FIELDS}
    for key in keys:
        if key not in accepted:
            raise ValueError(
                f"{source}: {key!r} is not a {(config_class or HybridSSMConfig).__name__} field{_closest(key, valid)}"
                " (list the fields with hf_ssm.modeling.configuration_hybrid_ssm.config_field_names())"
            )


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: the fewest single-character insertions, deletions and substitutions from a to b."""
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def _typo_of(key: str, names) -> str | None:
    """The name in `names` that `key` is a typo of (edit distance 1, or 2 for names of 8+ characters), else None."""
    near = [(edit_distance(key, name), name) for name in names]
    near = [(d, name) for d, name in near if d <= (2 if len(name) >= 8 else 1)]
    return min(near)[1] if near else None


def _reject_misspelt_fields(config_class, keys) -> None:
    """ValueError for an extra key (not a declared field) that is most likely a misspelt field of this class.

    The rule: a key that is a declared field (this class's, PretrainedConfig's, or one a registered mixer adds),
    an old field name, `num_labels`, a top-level RoPE keyword (`rope_theta`, `partial_rotary_factor`) or private
    (leading underscore) passes. Any other key is refused when
    (a) it starts with a registered mixer's field prefix (`pd_ssm_`, `lru_`, ...), or (b) it is within a small
    edit distance of one of this class's own fields (1, or 2 for fields of 8+ characters), naming the closest
    field. Every other unknown key becomes a plain attribute, as transformers does for extra keys (`architectures`,
    `auto_map`, task-specific settings...); none of the keys transformers itself sets is that close to a field.
    """
    prefixes = field_prefixes()
    declared = {*config_field_names(config_class), *registered_config_fields()}
    for key in keys:
        if key in declared or key in RENAMED_CONFIG_FIELDS or key in ("num_labels", *ROPE_KEYWORDS):
            continue
        if key.startswith("_"):
            continue
        if key.startswith(prefixes):
            prefix = next(p for p in prefixes if key.startswith(p))
            same_prefix = sorted(name for name in declared if name.startswith(prefix))
            hint = _closest(key, same_prefix) or f"; its fields with this prefix: {same_prefix}"
            raise ValueError(f"`{key}` is not a {config_class.__name__} field{hint}")
        typo_of = _typo_of(key, _own_fields().union(ROPE_KEYWORDS))
        if typo_of is not None:
            raise ValueError(f"`{key}` is not a {config_class.__name__} field; did you mean `{typo_of}`?")


def _own_fields() -> frozenset:
    """The fields a change of which is re-validated: this class's own and those registered mixers add."""
    return _OWN_FIELDS.union(registered_config_fields())


def _is_change_of_a_field(key: str) -> bool:
    """Whether setting `key` after construction changes fields of this class (and is re-validated): one of its own
    fields, or a top-level name of a rope_parameters key (ROPE_KEYWORDS)."""
    return key in _own_fields() or key in ROPE_KEYWORDS


class HybridSSMConfig(PretrainedConfig):
    r"""Configuration of a decoder whose layers are attention blocks and structured SSM mixers in any order.

    Args:
        vocab_size: number of tokens.
        hidden_size: model width d.
        intermediate_size: SwiGLU hidden width.
        num_hidden_layers: number of decoder blocks.
        num_attention_heads / num_key_value_heads / head_dim: attention heads (grouped-query when
            `num_key_value_heads < num_attention_heads`); `head_dim` defaults to `hidden_size // num_attention_heads`.
        max_position_embeddings: longest sequence (prompt + cache) the model accepts when it has attention
            layers; longer input raises a ValueError instead of running RoPE past the trained range.
        sliding_window: None (default: every attention layer reads the whole past) or w > 0: each attention layer
            reads the w most recent tokens, the token itself included (transformers' Mistral / Qwen2 convention),
            in training, the full forward and cached decoding alike. The SSM layers' state still carries the whole
            past: a hybrid trained at context w can read far longer inputs with RoPE never past w.
        rope_parameters: RoPE settings of the attention layers, one dict for all of them, as in transformers:
            `rope_type` (`"default"` or a type of transformers' `ROPE_INIT_FUNCTIONS`, e.g. `"linear"`, `"dynamic"`,
            `"yarn"`, with that type's keys, e.g. `factor`) and `rope_theta` (the base, a finite number > 0).
            Missing keys are completed as transformers does (`rope_type` "default", `rope_theta` 10000.0). Like
            transformers' Llama / Qwen2 configs it also takes the older keywords `rope_theta=` (fills in
            `rope_parameters["rope_theta"]`; after construction, `config.rope_theta = ...` changes it) and
            `rope_scaling=` (the dict under its old name); one that disagrees with `rope_parameters` is refused.
            The attention rotates every channel of a head: `partial_rotary_factor` may only be 1.
        mixers: the mixer of every layer, as a list of names (`"attention"`, `"pd_ssm"`, ...) or a pattern
            string with one letter per layer: `A` attention, `S` the `ssm_mixer`, `P` pd_ssm. Default: all `S`.
            Also `L` lrc_ssm, `G` gru_ssm, `M` mgu_ssm, `R` lstm_ssm.
            Also `B` bd_lru, `H` h_lru, `D` diag_lru, `T` lstm (each mixer's letter is in its mixer_registry.py
            declaration).
        ssm_mixer: the mixer that `S` stands for.

        The PD-SSM defaults are the state tracker of docs/design.md §8.8 (the `hybrid_block_wide` recipe's layer,
        which learns A5 inside a residual stack with attention): 64 automaton heads of N = 8 whose transitions are
        read off the normed input (`direct`), D = 1, no input map (x_t = P_t ... P_1 e_0), read through a frozen
        random C, W_P trained at 1 / sqrt(d) of the model's rate (`hf_ssm.parameter_groups`). The paper's layer
        (dictionary, complex D, b_t = B u_t) is `PAPER_PD_SSM_LAYER`; checkpoints saved under the old defaults load
        with them (`from_dict`).
        pd_ssm_num_heads: PD-SSM heads H (each with its own state of N complex numbers; default 64).
        pd_ssm_head_state_size: N, the state size of each PD-SSM head (a layer's state is H x N complex numbers;
            default 8).
        pd_ssm_dict_size: PD-SSM dictionary size K of the transition generator.
        pd_ssm_temperature: straight-through softmax temperature tau of the P generator.
        pd_ssm_mlp_width: hidden width of the magnitude and phase MLPs (default 2N).
        pd_ssm_magnitude_bias_init / pd_ssm_phase_bias_init: initial output biases of the magnitude and phase MLPs,
            i.e. where D starts: |D| = sigmoid(magnitude bias), arg D = 2 pi sigmoid(phase bias).
        pd_ssm_diagonal: what D may be. `"complex"` (the paper, docs/design.md §4): |D| and arg D both learnt.
            `"magnitude"`: arg D = 0 exactly (no phase MLP), so every rotation of the state is a permutation P; a
            learnt phase can only approximate a flip or a 1/5 turn, and that error grows with the sequence length.
            `"unit"` (default): D = 1 (no MLPs), the permutations alone: an automaton's run.
        pd_ssm_initial_state: x_0 of every head when no state is passed in. `"zeros"` (the paper, docs/design.md
            §4); `"one_hot"` (default): x_0 = e_0, the start state of an automaton (the PD-SSM authors'
            state-tracking code);
            `"head_basis"`: head h starts at e_(h mod N), so H heads that learn the same permutations track the images
            of H different points (H = N = 5 heads name a whole permutation of 5 points, e.g. an A5 element);
            `"learned"`: a trained complex vector per head, starting at e_0. From a one-hot start the permutations
            alone carry an automaton's state; from zeros the inputs B u_t must also be tuned to (A_t - I) v to
            telescope, and any mismatch accumulates with the length. A learned x_0 with distinct entries lets the
            state name a whole permutation (P_t ... P_1 x_0), e.g. an A5 element with N = 5.
        pd_ssm_dictionary_diagonal_init: added to the diagonal of every dictionary matrix at initialisation
            (default 0: N(0, 1/N), docs/design.md §4.2). About 1 makes P start as the identity for every input, so the
            layer starts as a plain memory and inputs learn to move the state away from it (an exact, non-drifting
            permutation) instead of rotating it with the phase of D.
        pd_ssm_transition: how P_t is made. `"dictionary"` (the paper, docs/design.md §4): column argmax of the token's
            mix M_t = sum_k s_t,k M_k of K trainable matrices, Theta(K N^2) per token. `"bank"` (after Flash PD-SSM,
            arXiv 2605.19150): K trainable score matrices give K fixed column-one-hot matrices once per forward,
            and every token picks one by the argmax of its selection logits, Theta(d K + N) per token.
            `"direct"` (default): P_t = column argmax of the N x N logits L_t = W_P u_t of every head (W_P: d -> H N^2,
            no dictionary and no selection), Theta(d H N^2) per token: each input has its own free transition
            table, as in a minimal automaton with one logit table per token. W_P starts N(0, s^2 / d) with
            s = `pd_ssm_transition_init_scale`, so a unit-RMS input (the normed token embedding) starts with
            N(0, s^2) logits, a different random transition for each token. Straight-through gradients in every
            mode (the column softmax at `pd_ssm_temperature` in the backward). The accepted values are the modes
            registered in pd_transitions.py (`transition_names()`; `register_transition` adds one at run time).
        pd_ssm_output_skip: whether the PD-SSM output adds D_skip * u_t to Re(C x_t) (True: the paper); False
            (default): y_t = Re(C x_t) and the layer has no D_skip (a post-norm block then has no skip either).
        pd_ssm_output_init: how C (the map of [Re x, Im x] of every head to width d) starts. `"normal"` (default):
            N(0, initializer_range^2) like every linear map. `"identity"`: C = the d x 2HN identity (needs
            hidden_size >= 2 * pd_ssm_num_heads * pd_ssm_head_state_size), so that what follows the mixer starts by
            reading the heads' states as they are, not through a small random projection.
        pd_ssm_output_init_scale: C's start as a multiple of `pd_ssm_output_init`'s (> 0, default 1.0): N(0, (s *
            initializer_range)^2), or s times the identity. With C frozen (`pd_ssm_output_trainable=False`) it is the
            scale of the layer's output in the residual stream: the layer's states are one-hot (norm sqrt(H) over
            the heads), so at 1.0 they can outweigh the token embedding that the attention layers above read, and
            attention then fails to bind keys to values (docs/design.md §8.8).
        pd_ssm_output_trainable: whether C is trained (True: the paper). False (default) keeps C at its initial value
            (requires_grad False; saved and loaded like any weight): with `pd_ssm_output_init="identity"` the rest of
            the model reads the heads' states themselves throughout training.
        pd_ssm_transition_init_scale: s above (> 0, default 1.0); read by `pd_ssm_transition="direct"` only.
        pd_ssm_transition_lr_scale: the learning rate of the direct transition's W_P (`transition_proj`) as a multiple
            of the model's (> 0; default None: 1 / sqrt(d), d the width W_P reads), applied by
            `hf_ssm.parameter_groups` (the optimizer's parameter
            groups; what the model computes does not depend on it). Why (docs/design.md §8.8): where W_P reads the
            block's RMSNorm(u), one Adam step moves a token's logits sqrt(d) (one-hot-like u) to d (dense u) times as
            far as a free logit table's step; 1/sqrt(d) gives the table's step back. Needs a mode with a W_P
            (`pd_ssm_transition="direct"`) where it is set and differs from 1.
        pd_ssm_transition_norm: whether the direct transition reads RMSNorm(u_t) (its own trained gain, initialised
            at 1) instead of u_t (default False): P_t's logits are W_P RMSNorm(u_t), unit-RMS input whatever block
            feeds the mixer (the post-norm block feeds it the raw N(0, 0.02^2) embedding). Read by
            `pd_ssm_transition="direct"` only.
        pd_ssm_input: what each step adds to the state. `"projection"` (the paper, docs/design.md §4): b_t = B u_t.
            `"none"` (default): b_t = 0 and the layer has no B, so x_t = A_t ... A_1 x_0 is exactly the run of the
            automaton that the transitions spell from the start state (needs a non-zero pd_ssm_initial_state). With
            B the trained layers also accumulate injected inputs along directions that A_t keeps, a component that
            grows with the sequence length and, past the training lengths, swamps the automaton's state (RESULTS.md).
        lrc_num_channels: D, the state channels of lrc_ssm / gru_ssm / mgu_ssm / lstm_ssm (one number each; the
            LSTM keeps (c, h), two per channel).
        lstm_hidden_size: H, the hidden size of the `lstm` mixer (one sequential torch.nn.LSTM layer; its state is
            (h, c), 2 H numbers). Not the `lstm_ssm` mixer, which reads `lrc_num_channels`.
        lrc_input_term: keep the input term W_eps u in the LRC elastance eps (the released code drops it).
        lrc_solver: `"deer"` (Newton over the whole sequence, default) or `"sequential"` (a plain loop of exact
            steps; for debugging). Decoding one token is always the exact single step.
        deer_tol: DEER stops when max|x^(i+1) - x^(i)| < deer_tol (>= 0; 0 runs exactly `deer_max_iter` steps).
        deer_max_iter: most Newton iterations per solve (a non-converged solve warns and returns its last iterate).
        deer_damping: ELK-style damping k in (0, 1] used once an iterate diverges: J <- (1 - k) J clipped to
            norm 1; k moves towards 1 (a plain fixed-point step) if it diverges again.
        deer_max_growth: an iterate larger than this multiple of the current scale counts as diverging (> 1).
        lru_total_state_size: N m, the whole recurrent state of a bd_lru / h_lru / diag_lru layer, split into
            N = lru_total_state_size / m groups of m (BD-LRU: N blocks; H-LRU: N channels with their last m
            values; diag_lru: m = 1).
        lru_group_size: m, the size of each group: the BD-LRU block size, the H-LRU order (>= 1; must divide
            `lru_total_state_size`). diag_lru ignores it (m = 1).
        lru_normalization: how the selective gates of a row (input gate included) are normalised: `"softmax"`
            (default), `"sigmoid_l1"`, `"tanh_l1"` (signed), `"relu_l1"`, all of which keep the state bounded by
            the largest input value seen, or `"none"` (raw gates; the state is unbounded and can blow up).
        classifier_pooling: `"last"` (last real token) or `"mean"` (mean over real tokens), for
            HybridSSMForSequenceClassification.
        input_channels: number of channels C of continuous input (B, T, C) for
            HybridSSMForTimeSeriesClassification, which encodes it to width d; None (default) for token models.
        scan_backend: which implementation runs the SSM scans: `"auto"` (default: the Triton kernels of
            `hf_ssm.ops` on CUDA tensors when triton imports, the PyTorch scans otherwise), `"torch"` (always
            the PyTorch scans) or `"triton"` (always the kernels; a clear error where they cannot run, e.g. CPU
            tensors without `TRITON_INTERPRET=1`). A non-empty environment variable `HF_SSM_SCAN_BACKEND` overrides
            it. Results agree to float32 rounding, so a checkpoint can be trained with one and run with the other.
            The mixers read it at every call, so `model.config.scan_backend = "torch"` on a built model takes
            effect at the next forward.
        block_type: what every decoder layer computes around its mixer (docs/design.md §7.1). `"pre_norm_residual"`
            (default): x + Mixer(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)), and a final RMSNorm after the stack.
            `"post_norm_mixer"`, the PD-SSM authors' state-tracking block: x <- LayerNorm(Dropout(Mixer(x)) +
            D_skip * x) with a learnt per-channel D_skip (initialised to 1) in place of the residual, no MLP and
            no final norm (the last block ends in a LayerNorm, eps = `rms_norm_eps`). A pd_ssm mixer already adds
            its own D_skip * u to Re(C x_t), so there the block uses that skip and drops out only Re(C x_t):
            LayerNorm(Dropout(Re(C x_t)) + D_skip * u_t), as in the authors' code. Every other mixer and attention
            get the block's own D_skip. `intermediate_size` and `hidden_act` are then unused.
            `"mixer_mlp"`: x <- Mixer(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)), and the final RMSNorm: the pre-norm
            block without the residual around the mixer, so that the rest of the model reads the mixer's output
            only. With a pd_ssm mixer and `pd_ssm_output_skip=False` a one-layer state-tracking model's classifier
            then sees a function of the automaton state alone, never the current token's embedding.
            `"mixer_only"`: x <- Mixer(x), nothing around it (no norm, residual or MLP), and the final RMSNorm: with
            a pd_ssm mixer without D_skip and C = the identity, a one-layer model's head reads RMSNorm of the
            automaton states themselves. Unlike the LayerNorm of `"post_norm_mixer"`, an RMSNorm leaves a state
            entry that is 0 at 0, so the head's weights of the inactive states get no gradient.
        block_dropout: dropout probability in [0, 1) on the mixer output of a `"post_norm_mixer"` block (the
            authors use 0.01); must be 0 for the other block types, which have no dropout there.

    Extra keys: like any transformers config, this one keeps an unknown keyword (or `config.x = ...`, or a key of
    a loaded config.json) as a plain attribute, since transformers itself adds some (`architectures`, `auto_map`,
    `_name_or_path`, ...). A key that is most likely a misspelt field is refused instead, naming the closest
    field: one that starts with a mixer's field prefix (`pd_ssm_`, `lru_`, `lrc_`, `deer_`) without being a field,
    or one within edit distance 1 of a field (2 for fields of 8 or more characters), e.g. `hiden_size` or
    `block_typ` (`_reject_misspelt_fields`).

    Experimental fields (experimental_fields.py, docs/models.md): study knobs outside the stable fields above,
    accepted, checked, saved and reloaded like them but free to change or go in any release:
    `pd_ssm_identity_entry_logit`, `pd_ssm_shared_selection` and `pd_ssm_transition_input_size` (each documented
    in `experimental_fields.EXPERIMENTAL_FIELDS`). The pd_ssm mixer declares them in mixer_registry.py.

    Renamed fields (docs/design.md §9.1): `pd_ssm_state_size` is now `pd_ssm_head_state_size`, `lru_state_size`
    `lru_total_state_size`, `lru_block_size` `lru_group_size` and `lrc_state_size` `lrc_num_channels`, with the
    same values. The old names (legacy_names.RENAMED_CONFIG_FIELDS) still work everywhere a field name does, so
    configs saved under them load, each with a FutureWarning naming the new field; a config saved again writes
    the new names. A removed field (legacy_names.REMOVED_CONFIG_FIELDS) loads at its former default with a
    FutureWarning and is refused with a ValueError naming it at any other value.
    """

    model_type = "hybrid_ssm"
    keys_to_ignore_at_inference = ["cache"]

    vocab_size: int = 256
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 8192
    sliding_window: int | None = None
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    use_cache: bool = True
    tie_word_embeddings: bool = False
    rope_parameters: RopeParameters | dict | None = None
    attention_bias: bool = False
    attention_dropout: float | int = 0.0
    mixers: list[str] | str | None = None
    ssm_mixer: str = "pd_ssm"
    layer_types: list[str] | None = None
    pd_ssm_num_heads: int = 64
    pd_ssm_head_state_size: int = 8
    pd_ssm_dict_size: int = 32
    pd_ssm_temperature: float = 1.0
    pd_ssm_mlp_width: int | None = None
    pd_ssm_magnitude_bias_init: float = 0.0
    pd_ssm_phase_bias_init: float = 0.0
    pd_ssm_dictionary_diagonal_init: float = 0.0
    pd_ssm_diagonal: str = "unit"
    pd_ssm_initial_state: str = "one_hot"
    pd_ssm_transition: str = "direct"
    pd_ssm_transition_init_scale: float = 1.0
    pd_ssm_transition_lr_scale: float | None = None
    pd_ssm_transition_norm: bool = False
    pd_ssm_output_skip: bool = False
    pd_ssm_output_init: str = "normal"
    pd_ssm_output_init_scale: float = 1.0
    pd_ssm_output_trainable: bool = False
    pd_ssm_input: str = "none"
    lrc_num_channels: int = 64
    lstm_hidden_size: int = 64
    lrc_input_term: bool = True
    lrc_solver: str = "deer"
    deer_tol: float = 1e-4
    deer_max_iter: int = 100
    deer_damping: float = 0.5
    deer_max_growth: float = 1e3
    classifier_pooling: str = "last"
    lru_total_state_size: int = 64
    lru_group_size: int = 4
    lru_normalization: str = "softmax"
    input_channels: int | None = None
    scan_backend: str = "auto"
    block_type: str = "pre_norm_residual"
    block_dropout: float = 0.0
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    # Validation holds however the config is built or changed (docs/design.md §7). transformers' own mechanism, the
    # `@strict` decorator of huggingface_hub, checks annotated types on assignment and runs `validate_*` methods at
    # construction and save, but raises StrictDataclass*Error (neither ValueError nor TypeError) and refuses an int
    # for a float field (`--override pd_ssm_magnitude_bias_init=3`), so this class checks in `__post_init__` and
    # re-checks every later change of one of its fields (`__setattr__`, `update`, `from_pretrained(path, **kw)`),
    # re-deriving `mixers` / `layer_types`; a change that fails leaves the config as it was.

    def __post_init__(self, **kwargs):
        drop_removed_fields(kwargs, type(self).__name__)
        self._take_renamed_fields(kwargs)
        _reject_misspelt_fields(type(self), kwargs)
        for name, default in registered_config_fields().items():  # fields of mixers registered outside this file
            setattr(self, name, kwargs.pop(name, default))
        self._check_values()
        self.mixers = self._resolve_mixers(self.mixers)
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            if ATTENTION in self.mixers and self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"`hidden_size` ({self.hidden_size}) must be divisible by `num_attention_heads` "
                    f"({self.num_attention_heads}), or give `head_dim` explicitly"
                )
            # max(1, .): a model without attention layers never uses head_dim, but a saved config must reload
            self.head_dim = max(1, self.hidden_size // self.num_attention_heads)
        if self.pd_ssm_mlp_width is None:
            self.pd_ssm_mlp_width = 2 * self.pd_ssm_head_state_size
        self.layer_types = self._derived_layer_types(self.layer_types)
        self._set_rope_parameters(
            self.rope_parameters,
            rope_scaling=kwargs.pop(ROPE_SCALING, None),
            **{key: kwargs.pop(key) for key in ROPE_KEYWORDS if key in kwargs},
        )
        self._validate()
        super().__post_init__(**kwargs)

    def save_pretrained(self, save_directory, push_to_hub: bool = False, **kwargs):
        """transformers' save_pretrained; where the config is registered for remote code (`import hf_ssm`), its
        code and everything it imports are exported flat next to config.json (portable.py), so that AutoConfig
        loads it with trust_remote_code where hf_ssm is not installed (push_to_hub=True is refused there, as for
        the model's save_pretrained)."""
        remote = self._auto_class is not None
        if remote and push_to_hub:
            raise ValueError(
                "save_pretrained(push_to_hub=True) would upload the config's code before it is made portable; "
                "call config.push_to_hub(repo_id), which saves through save_pretrained first"
            )
        result = super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)
        if remote:
            write_portable_code(type(self).__module__, save_directory)
        return result

    def _take_renamed_fields(self, kwargs: dict) -> None:
        """Move fields given under an old name (a saved config, a keyword) out of `kwargs` into their new field.

        The dataclass has already set the new field (to its default unless given): a new field set to another
        value than the old one is a contradiction."""
        for old in [key for key in kwargs if key in RENAMED_CONFIG_FIELDS]:
            value = kwargs.pop(old)
            new = warn_renamed_field(old, type(self).__name__)
            current, default = getattr(self, new), type(self).__dataclass_fields__[new].default
            if current != default and current != value:
                raise ValueError(
                    f"`{old}` (the old name of `{new}`) = {value!r} and `{new}` = {current!r} disagree; "
                    f"give only `{new}`"
                )
            super().__setattr__(new, value)

    def __getattr__(self, key):
        # Only reached when normal lookup fails: an old field name reads its new field (with a FutureWarning).
        if key in RENAMED_CONFIG_FIELDS:
            return getattr(self, warn_renamed_field(key, type(self).__name__))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {key!r}")

    def __setattr__(self, key, value):
        if key in RENAMED_CONFIG_FIELDS:
            key = warn_renamed_field(key, type(self).__name__)
        if key == "problem_type":  # transformers' field, checked here too: an unknown value failed only at the loss
            check_choice(key, value, PROBLEM_TYPES)
        if _is_change_of_a_field(key) and self.__dict__.get("_post_init_done"):
            self._apply_changes({key: value})
            return
        if key not in self.__dict__ and not hasattr(type(self), key):  # a new extra attribute: not a typo of a field
            _reject_misspelt_fields(type(self), [key])
        super().__setattr__(key, value)

    def update(self, config_dict: dict) -> None:
        """Like PretrainedConfig.update, but this class's fields change together, then are validated once: use it
        to change fields that depend on each other, e.g. `config.update({"num_hidden_layers": 2, "mixers": "SA"})`."""
        config_dict = rename_config_fields(config_dict, type(self).__name__)
        drop_removed_fields(config_dict, type(self).__name__)
        own = {k: v for k, v in config_dict.items() if _is_change_of_a_field(k) or k == ROPE_SCALING}
        _reject_misspelt_fields(type(self), config_dict)
        super().update({k: v for k, v in config_dict.items() if k not in own})
        self._apply_changes(own)

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """PretrainedConfig.from_dict; keyword overrides of this class's fields (`from_pretrained(path,
        mixers="SA")`) are applied together and validated, and a misspelt field is refused. Old field names,
        in `config_dict` (a config saved before a renaming) or in `kwargs`, load into their new fields. A saved
        `config_dict` (one with `transformers_version`) that lacks a field of PAPER_PD_SSM_LAYER was saved before
        that field existed and computed with its value there, which it loads (the defaults have changed since).

        An override of a field in WEIGHT_MEANING_FIELDS that differs from the saved value (e.g.
        `from_pretrained(dictionary_checkpoint, pd_ssm_transition="bank")`) would load the saved weights into a
        layer that computes something else, often without a missing or unexpected parameter to show it: it is
        refused unless `allow_weight_meaning_change=True` is passed too, which loads it with a warning."""
        allow = kwargs.pop(ALLOW_WEIGHT_MEANING_CHANGE, False)
        if not isinstance(allow, bool):
            raise TypeError(f"`{ALLOW_WEIGHT_MEANING_CHANGE}` must be True or False, got {allow!r}")
        kwargs = rename_config_fields(kwargs, cls.__name__)
        drop_removed_fields(kwargs, cls.__name__)
        _reject_misspelt_fields(cls, kwargs)
        own = {k: kwargs.pop(k) for k in list(kwargs) if _is_change_of_a_field(k) or k == ROPE_SCALING}
        if SAVED_CONFIG_KEY in config_dict:  # saved before a field existed: that field at its default of the time
            present = {RENAMED_CONFIG_FIELDS.get(key, key) for key in config_dict}
            config_dict = {**{k: v for k, v in PAPER_PD_SSM_LAYER.items() if k not in present}, **config_dict}
        result = super().from_dict(config_dict, **kwargs)
        config = result[0] if isinstance(result, tuple) else result
        if own:
            saved = {name: getattr(config, name) for name in WEIGHT_MEANING_FIELDS}
            config._apply_changes(own)
            changed = {
                name: (saved[name], getattr(config, name)) for name in saved if getattr(config, name) != saved[name]
            }
            if changed:
                listed = ", ".join(f"`{name}` {old!r} -> {new!r}" for name, (old, new) in changed.items())
                if not allow:
                    raise ValueError(
                        f"the override {listed} changes what the saved weights compute (the checkpoint was saved with "
                        f"the first value); load with the saved value, or pass {ALLOW_WEIGHT_MEANING_CHANGE}=True to "
                        "reinterpret the weights on purpose (e.g. to start a new model from them)"
                    )
                warnings.warn(f"loading with {listed}: the saved weights now compute something else", stacklevel=2)
        return result

    def _apply_changes(self, changes: dict) -> None:
        """Set fields of this class after construction, re-derive `mixers` / `layer_types` and validate; on any
        error the config keeps its previous values."""
        before = dict(self.__dict__)
        set_raw = super().__setattr__
        try:
            for key, value in changes.items():
                if key not in (*ROPE_KEYWORDS, ROPE_SCALING):  # not attributes: rope_parameters changes, below
                    set_raw(key, value)
            self._check_values()
            if "ssm_mixer" in changes and "mixers" not in changes:
                new = changes["ssm_mixer"]
                if new != before["ssm_mixer"] and before["ssm_mixer"] in self.mixers:
                    raise ValueError(
                        f"`ssm_mixer` is what the letter S of a `mixers` pattern stands for, and this config's "
                        f"layers are already resolved ({self.mixers}): give `mixers` in the same change, e.g. "
                        f"config.update({{'ssm_mixer': {new!r}, 'mixers': {'S' * self.num_hidden_layers!r}}}) or "
                        f"from_pretrained(path, ssm_mixer={new!r}, mixers=...)"
                    )
            if "mixers" in changes or "num_hidden_layers" in changes or "ssm_mixer" in changes:
                set_raw("mixers", self._resolve_mixers(self.mixers))
            set_raw("layer_types", self._derived_layer_types(changes.get("layer_types")))
            keywords = {key: changes[key] for key in ROPE_KEYWORDS if key in changes}
            if "rope_parameters" in changes or ROPE_SCALING in changes:
                self._set_rope_parameters(
                    changes.get("rope_parameters"), rope_scaling=changes.get(ROPE_SCALING), **keywords
                )
            elif keywords:  # alone: the current settings with these keys changed
                self._set_rope_parameters({**self.rope_parameters, **keywords})
            self._validate()
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise

    def _set_rope_parameters(self, rope_parameters, rope_scaling=None, **keywords):
        """Set `rope_parameters` (a copy: completing it must not change the caller's dict) completed by transformers'
        own rule, `RotaryEmbeddingConfigMixin.convert_rope_params_to_dict`: `rope_scaling` (its old name) stands for
        it, a `rope_theta` / `partial_rotary_factor` keyword fills in that key, then `rope_type` "default" and
        `rope_theta` 10000.0 what is still missing (and the original length for yarn / llama3 / longrope).

        A keyword that disagrees with what the dict already says is refused: transformers keeps the dict's value
        without a word, so the keyword would have changed nothing. The values are checked in `_check_rope`."""
        for name, value in (("rope_parameters", rope_parameters), ("rope_scaling", rope_scaling)):
            if value is not None and not isinstance(value, dict):
                raise TypeError(
                    f"`{name}` must be a dict such as {{'rope_type': 'default', 'rope_theta': 10000.0}}, "
                    f"got {type(value).__name__}"
                )
        if rope_scaling is not None and rope_parameters is not None and rope_scaling != rope_parameters:
            raise ValueError(
                f"`rope_scaling` (the old name of `rope_parameters`) = {rope_scaling!r} and `rope_parameters` = "
                f"{rope_parameters!r} disagree; give only `rope_parameters`"
            )
        params = copy.deepcopy(rope_scaling if rope_scaling is not None else rope_parameters) or {}
        keywords = {key: value for key, value in keywords.items() if value is not None}  # None: not given
        for key, value in keywords.items():  # key: one of ROPE_KEYWORDS
            if key in params and params[key] != value:
                raise ValueError(
                    f"`{key}` = {value!r} and `rope_parameters['{key}']` = {params[key]!r} disagree; give the value "
                    "in one place"
                )
        # transformers sets `self.rope_parameters` as it completes it; after construction that assignment would come
        # back here as a change (__setattr__), so its code runs as it does during construction.
        post_init_done = self.__dict__.pop("_post_init_done", None)
        try:
            super().__setattr__("rope_parameters", params)
            self.convert_rope_params_to_dict(**keywords)
        finally:
            if post_init_done is not None:
                self.__dict__["_post_init_done"] = post_init_done

    def _check_rope(self) -> None:
        """ValueError naming the key unless `rope_parameters` is one flat dict the attention layers can compute:
        a known `rope_type`, a finite `rope_theta` > 0 (0 or less makes every logit NaN), `partial_rotary_factor` 1
        if given, a `factor` > 0 if given; with attention layers, transformers' checks of the type's keys too."""
        params = self.rope_parameters
        nested = [key for key, value in params.items() if isinstance(value, dict)]
        if nested:
            raise ValueError(
                f"`rope_parameters` must be one flat dict for all attention layers (this model has no RoPE per "
                f"layer type), got dicts under {nested}"
            )
        check_choice("rope_parameters['rope_type']", params.get("rope_type"), ROPE_TYPES)
        check_number("rope_parameters['rope_theta']", params.get(ROPE_THETA), low=0, low_open=True)
        if params.get("partial_rotary_factor", 1) != 1:
            raise ValueError(
                f"`rope_parameters['partial_rotary_factor']` must be 1 (the attention rotates every channel of a "
                f"head), got {params['partial_rotary_factor']!r}"
            )
        if "factor" in params:
            check_number("rope_parameters['factor']", params["factor"], low=0, low_open=True)
        if self.has_attention:  # it checks head_dim too, which a model without attention layers never reads
            try:
                self.validate_rope()
            except KeyError as err:  # a missing key of the rope type (transformers raises KeyError)
                raise ValueError(f"`rope_parameters`: {err.args[0]}") from None

    def _derived_layer_types(self, given) -> list[str]:
        """`layer_types` from `mixers` (DynamicCache reads it); a given value must be the same list."""
        derived = [ATTENTION_LAYER_TYPE if m == ATTENTION else SSM_LAYER_TYPE for m in self.mixers]
        if given is not None and list(given) != derived:
            raise ValueError(
                f"`layer_types` is derived from `mixers` ({derived} for {self.mixers}), got {given!r}: "
                "change `mixers` instead"
            )
        return derived

    def _resolve_mixers(self, mixers) -> list[str]:
        if mixers is None:
            return [self.ssm_mixer] * self.num_hidden_layers
        if isinstance(mixers, str):
            letters = {**pattern_letters(), "S": self.ssm_mixer}
            unknown = sorted({ch for ch in mixers if ch not in letters})
            if unknown:
                raise ValueError(
                    f"`mixers` pattern {mixers!r} has unknown letters {unknown}; accepted letters: {sorted(letters)}"
                )
            mixers = [letters[ch] for ch in mixers]
        if not isinstance(mixers, (list, tuple)):
            raise TypeError(f"`mixers` must be a list of mixer names or a pattern string, got {type(mixers).__name__}")
        mixers = list(mixers)
        accepted = (ATTENTION, *mixer_names())
        for i, name in enumerate(mixers):
            if name not in accepted:
                raise ValueError(f"`mixers[{i}]` = {name!r} is not a known mixer; accepted: {list(accepted)}")
        if len(mixers) != self.num_hidden_layers:
            raise ValueError(
                f"`mixers` names {len(mixers)} layers but `num_hidden_layers` is {self.num_hidden_layers}; "
                "give exactly one mixer per layer (after construction, change both in one "
                "config.update({...}))"
            )
        return mixers

    def _check_values(self) -> None:
        """The fields every model uses, each on its own: type, range, accepted values."""
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "max_position_embeddings"):  # fmt: skip
            check_positive_int(name, getattr(self, name))
        for name in ("num_key_value_heads", "head_dim", "input_channels", "sliding_window"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        for name in ("use_cache", "tie_word_embeddings", "attention_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False, got {getattr(self, name)!r}")
        check_choice("ssm_mixer", self.ssm_mixer, mixer_names())
        check_choice("hidden_act", self.hidden_act, sorted(ACT2FN))
        check_choice("classifier_pooling", self.classifier_pooling, CLASSIFIER_POOLING)
        check_choice("problem_type", self.problem_type, PROBLEM_TYPES)
        check_choice("scan_backend", self.scan_backend, SCAN_BACKENDS)
        check_number("rms_norm_eps", self.rms_norm_eps, low=0, low_open=True)
        check_number("initializer_range", self.initializer_range, low=0)
        check_number("attention_dropout", self.attention_dropout, low=0, high=1, high_open=True)
        self._validate_block()
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            ids = value if isinstance(value, list) and name == "eos_token_id" else [value]
            for token in ids:
                if token is not None and (
                    isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < self.vocab_size
                ):
                    raise ValueError(
                        f"`{name}` must be None or a token id in [0, vocab_size - 1 = {self.vocab_size - 1}], "
                        f"got {value!r}"
                    )

    def _validate(self) -> None:
        """The fields of the mixer families the layers use (checked again whenever `mixers` changes), and the
        constraints between fields."""
        self._check_rope()
        if ATTENTION in self.mixers:
            if self.num_attention_heads % self.num_key_value_heads:
                raise ValueError(
                    f"`num_attention_heads` ({self.num_attention_heads}) must be a multiple of "
                    f"`num_key_value_heads` ({self.num_key_value_heads})"
                )
            if self.head_dim % 2:
                raise ValueError(f"`head_dim` must be even for RoPE, got {self.head_dim}")
        # each mixer's own fields, by its registered check (once per check: a family shares one)
        checks = (mixer_spec(m).check_config for m in dict.fromkeys(self.mixers) if m != ATTENTION)
        for check in dict.fromkeys(c for c in checks if c is not None):
            check(self)

    def _validate_block(self) -> None:
        check_choice("block_type", self.block_type, BLOCK_TYPES)
        if not (_is_number(self.block_dropout) and 0 <= self.block_dropout < 1):
            raise ValueError(f"`block_dropout` must be a number in [0, 1), got {self.block_dropout!r}")
        if self.block_type != "post_norm_mixer" and self.block_dropout != 0:
            raise ValueError(
                f"`block_dropout` = {self.block_dropout!r} applies only to block_type='post_norm_mixer'; the "
                f"{self.block_type!r} block has no dropout there (set block_dropout=0 or change block_type)"
            )

    @property
    def ssm_layer_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.mixers) if m != ATTENTION]

    @property
    def has_attention(self) -> bool:
        return ATTENTION in self.mixers


# The fields this class declares itself (new fields join automatically): changes to them are re-validated.
_OWN_FIELDS = frozenset(vars(HybridSSMConfig)["__annotations__"])

__all__ = ["WEIGHT_MEANING_FIELDS", "HybridSSMConfig", "check_config_keys", "config_field_names"]
