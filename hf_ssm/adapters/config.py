"""Configuration of an SSM adapter on a frozen causal LM (docs/design.md §10), saved as `adapter_config.json`.

The adapter is one residual branch after decoder layer `layer_index` of the base model:

    readout = "lm_head":     h <- h + W_out Mixer(Norm(h))      W_out (d, d) zero-init, so the base starts unchanged
    readout = "classifier":  logits = W_cls Mixer(Norm(h))      (B, T, num_labels); the base's h is never changed
    classifier_per_head:     logits = sum_h log_softmax(W_h x_h + b_h)   every PD-SSM head answers from its own
                             state x_h; trained with each head's own cross-entropy (`SSMAdapter.head_logits`)
    ... with "lm_head":      h <- h + W_out softmax(logits)              the heads' vote, written into the residual
                             stream (W_out (d, num_labels) zero-init) for the base's own LM head to name; the
                             vote is detached there, so the LM loss trains W_out and each head its own loss

With `write_layer_index` w > k (readout "lm_head") the branch reads h_k and writes later: h_w <- h_w + W_out
Mixer(Norm(h_k)), so the adapter reads the features where they name the events (an early layer) and writes
where the LM head reads (the last layer).

The mixer is any name in `SSM_MIXER_CLASSES` (default `pd_ssm`); `mixer_settings` holds its HybridSSMConfig
fields (e.g. `pd_ssm_head_state_size`). The `base_*` fields are filled in when the adapter is attached and are
checked when it is loaded onto another base.

`kind="entity_tracking"` replaces RMSNorm -> mixer by the entity-tracking adapter (entity_tracking.py, docs/design.md
§10.1): a tagger of the base's features, a binding memory of names and objects, and a PD-SSM permutation state whose
transpositions the swaps select; its readout scores the answer options (`num_labels`), as the classifier or, written
through W_out (d, num_labels), for the LM head. Its settings are `entity_settings` (ENTITY_DEFAULTS).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

ADAPTER_CONFIG_NAME = "adapter_config.json"
ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"
ADAPTER_TYPE = "hf_ssm_adapter"
READOUTS = ("lm_head", "classifier")
ADAPTER_KINDS = ("mixer", "entity_tracking")
# entity_settings of kind "entity_tracking": person / object slots (at least the most people of a story), the
# tagger's hidden width (0: a linear tagger), the start of the two learnt similarity scales (names, objects), and
# whether the story ends at the first option letter (`story_ends_at_options`: a name or object tagged after it is read
# as option text; adapters saved before the setting existed load with False, and compute what they computed).
ENTITY_DEFAULTS = {
    "slots": 8,
    "tagger_width": 64,
    "name_scale": 20.0,
    "object_scale": 20.0,
    "story_ends_at_options": True,
}
# HybridSSMConfig fields the adapter sets itself from the base model; `mixer_settings` may not override them.
RESERVED_MIXER_SETTINGS = ("hidden_size", "num_hidden_layers", "mixers", "ssm_mixer", "layer_types", "vocab_size")


@dataclass
class SSMAdapterConfig:
    """Where and what to attach.

    Args:
        mixer: the SSM mixer, a name registered in `hf_ssm.modeling.SSM_MIXER_CLASSES` (default `"pd_ssm"`).
        mixer_settings: HybridSSMConfig fields of that mixer, e.g. `{"pd_ssm_head_state_size": 8,
            "pd_ssm_dict_size": 16}`; unset fields take HybridSSMConfig's defaults.
        layer_index: insert after this decoder layer (0-based; negative counts from the end; default -1, the last).
        write_layer_index: readout "lm_head" only: the decoder layer after whose output the adapter's update is
            added (>= `layer_index` once both are resolved; negative counts from the end). None (default): the
            update is added where the adapter reads, after `layer_index`. The layers between are frozen and never
            see the update, so the features of both layers are fixed functions of the text (the frozen-prefix
            cache keeps both). **[choice]**
        readout: `"lm_head"` (the adapter adds to the residual stream and so feeds the base's LM head) or
            `"classifier"` (its own linear readout to `num_labels` classes; the base's logits stay untouched).
        num_labels: number of classes of the `"classifier"` readout and of `classifier_per_head` (required there,
            unused otherwise).
        classifier_per_head: `pd_ssm` mixer only: instead of one linear map of the mixer's output, every head has
            its own linear readout of its state [Re x_h, Im x_h] (2N -> num_labels) and the heads vote as a
            product of experts (their log-probabilities summed). Training gives every head its own
            cross-entropy, so a head that learnt the automaton is not pulled by the others, and the vote lets it
            outweigh the unsure ones (docs/adapter.md). With readout `"classifier"` the vote is the output; with
            readout `"lm_head"` the vote's probabilities p (num_labels) are written into the residual stream as
            W_out p (W_out zero-init), so the frozen LM head names the answer from the same vote; p is detached
            there, so the LM loss trains W_out alone and every head still learns from its own loss. The mixer's C
            (`out_proj`) and skip are not used and stay frozen. **[choice]**
        norm_eps: epsilon of the adapter's input RMSNorm.
        near_identity_init: start the mixer close to the identity transition so that a fresh adapter already
            carries information across long texts (PD-SSM: P = I through a diagonal of +1 on every dictionary
            matrix, |D| ~ 1 - 5e-5 and arg D ~ 3e-4 rad through the biases of the magnitude / phase MLPs). With
            docs/design.md §4's init every token scrambles the state (random P, |D| ~ 0.5, arg D ~ pi), and on
            stories of hundreds of tokens nothing trains. Mixers without these parameters ignore it. **[choice]**
        frozen_mixer_parameters: names (or name prefixes) of mixer parameters that keep their initial values,
            e.g. `["magnitude", "phase"]` for a PD-SSM whose D stays at the near-identity start and whose state
            is carried by the exact permutations P alone. Default: none (every adapter parameter trains).
        transition_token_ids: token ids at which the recurrent state may change; at every other token it is
            carried unchanged (the step acts as the identity, as padding does). None (default): every token is a
            step. `hf_ssm.adapters.sentence_end_token_ids(tokenizer)` gives the tokens that end a sentence, so the
            state moves once per sentence, driven by the base's features at its final token (docs/adapter.md).
            Needs `input_ids` in every forward. **[choice]**
        standardize_input: subtract a per-feature mean from the base's hidden states and divide by a per-feature
            scale before the adapter's norm (buffers `input_mean`, `input_scale`, saved with the weights; they start
            at 0 and 1 and are set from training features by `SSMAdapter.set_input_statistics`). A pretrained LM's
            hidden states share a few huge outlier features, so without it every input starts with nearly the same
            transition (docs/adapter.md). **[choice]**
        kind: `"mixer"` (default: RMSNorm -> `mixer` -> readout) or `"entity_tracking"`
            (hf_ssm.adapters.entity_tracking: the tracker of who holds which object, for tracking_shuffled_objects;
            needs `num_labels`, the number of answer options, and leaves `mixer_settings`,
            `frozen_mixer_parameters`, `transition_token_ids` and `classifier_per_head` at their defaults: it has no
            mixer of its own). **[choice]**
        entity_settings: kind "entity_tracking" only: values for ENTITY_DEFAULTS' keys (`slots`, `tagger_width`,
            `name_scale`, `object_scale`, `story_ends_at_options`); missing keys take the defaults.
        base_model_name_or_path: the base the adapter was trained on (informational, as in PEFT configs).
        base_model_type / base_hidden_size / base_num_hidden_layers: recorded at attach time; loading onto a base
            with another width or layer count raises ValueError.
    """

    mixer: str = "pd_ssm"
    mixer_settings: dict = field(default_factory=dict)
    layer_index: int = -1
    write_layer_index: int | None = None
    readout: str = "lm_head"
    num_labels: int | None = None
    classifier_per_head: bool = False
    norm_eps: float = 1e-6
    near_identity_init: bool = True
    frozen_mixer_parameters: list = field(default_factory=list)
    transition_token_ids: list | None = None
    standardize_input: bool = False
    kind: str = "mixer"
    entity_settings: dict = field(default_factory=dict)
    base_model_name_or_path: str | None = None
    base_model_type: str | None = None
    base_hidden_size: int | None = None
    base_num_hidden_layers: int | None = None
    adapter_type: str = ADAPTER_TYPE

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Every field's type and accepted values (a ValueError naming the field); normalises mixer_settings (old
        field names), frozen_mixer_parameters and transition_token_ids (sorted)."""
        self._validate_mixer()
        self._validate_readout()
        if not (
            isinstance(self.frozen_mixer_parameters, (list, tuple))
            and all(isinstance(n, str) and n for n in self.frozen_mixer_parameters)
        ):
            raise ValueError(
                f"`frozen_mixer_parameters` must be a list of parameter names, got {self.frozen_mixer_parameters!r}"
            )
        self.frozen_mixer_parameters = list(self.frozen_mixer_parameters)
        if self.transition_token_ids is not None:
            self._validate_transition_tokens()
        if not isinstance(self.standardize_input, bool):
            raise ValueError(f"`standardize_input` must be True or False, got {self.standardize_input!r}")
        if not isinstance(self.near_identity_init, bool):
            raise ValueError(f"`near_identity_init` must be True or False, got {self.near_identity_init!r}")
        if not (isinstance(self.norm_eps, (int, float)) and self.norm_eps > 0):
            raise ValueError(f"`norm_eps` must be a number > 0, got {self.norm_eps!r}")
        if self.adapter_type != ADAPTER_TYPE:
            raise ValueError(f"`adapter_type` must be {ADAPTER_TYPE!r}, got {self.adapter_type!r}")
        self._validate_kind()

    def _validate_kind(self) -> None:
        """`kind` one of ADAPTER_KINDS; an entity tracker's `entity_settings` (filled with ENTITY_DEFAULTS), its
        `num_labels`, and none of the mixer's fields set."""
        if self.kind not in ADAPTER_KINDS:
            raise ValueError(f"`kind` must be one of {list(ADAPTER_KINDS)}, got {self.kind!r}")
        if not isinstance(self.entity_settings, dict):
            raise ValueError(
                f"`entity_settings` must be a dict of {sorted(ENTITY_DEFAULTS)}, got {self.entity_settings!r}"
            )
        if self.kind == "mixer":
            if self.entity_settings:
                raise ValueError(
                    f"`entity_settings` applies to kind='entity_tracking' only, got {self.entity_settings!r}"
                )
            return
        unknown = sorted(set(self.entity_settings) - set(ENTITY_DEFAULTS))
        if unknown:
            raise ValueError(f"`entity_settings` has unknown keys {unknown}; accepted: {sorted(ENTITY_DEFAULTS)}")
        settings = {**ENTITY_DEFAULTS, **self.entity_settings}
        for name, low in (("slots", 2), ("tagger_width", 0)):
            value = settings[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"`entity_settings['{name}']` must be an int >= {low}, got {value!r}")
        for name in ("name_scale", "object_scale"):
            value = settings[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"`entity_settings['{name}']` must be a number > 0, got {value!r}")
        if not isinstance(settings["story_ends_at_options"], bool):
            raise ValueError(
                "`entity_settings['story_ends_at_options']` must be True or False, got "
                f"{settings['story_ends_at_options']!r}"
            )
        self.entity_settings = settings
        if isinstance(self.num_labels, bool) or not isinstance(self.num_labels, int) or self.num_labels < 2:
            raise ValueError(
                "`num_labels` (the answer options) must be an int >= 2 with kind='entity_tracking', got "
                f"{self.num_labels!r}"
            )
        mixer_fields = {
            "mixer_settings": self.mixer_settings != {},
            "frozen_mixer_parameters": self.frozen_mixer_parameters != [],
            "transition_token_ids": self.transition_token_ids is not None,
            "classifier_per_head": self.classifier_per_head,
        }
        set_fields = [name for name, is_set in mixer_fields.items() if is_set]
        if set_fields:
            raise ValueError(
                f"kind='entity_tracking' has no mixer: leave {set_fields} at their defaults (the tracker reads every "
                "token and answers with one readout)"
            )

    def _validate_mixer(self) -> None:
        """`mixer` a registered mixer; `mixer_settings` HybridSSMConfig fields (old names renamed), none reserved."""
        # Imported here: the registry grows as mixers are added, and config.py stays importable on its own.
        from ..modeling import SSM_MIXER_CLASSES

        if self.mixer not in SSM_MIXER_CLASSES:
            raise ValueError(f"`mixer` must be one of {sorted(SSM_MIXER_CLASSES)}, got {self.mixer!r}")
        if not isinstance(self.mixer_settings, dict):
            raise ValueError(f"`mixer_settings` must be a dict of HybridSSMConfig fields, got {self.mixer_settings!r}")
        from ..modeling.legacy_names import rename_config_fields

        # fields under a name from before a renaming (an adapter saved then) move to their new name, with a warning
        self.mixer_settings = rename_config_fields(self.mixer_settings, "SSMAdapterConfig.mixer_settings")
        reserved = sorted(set(self.mixer_settings) & set(RESERVED_MIXER_SETTINGS))
        if reserved:
            raise ValueError(
                f"`mixer_settings` may not set {reserved}: the adapter takes them from the base model "
                f"(reserved: {list(RESERVED_MIXER_SETTINGS)})"
            )
        from ..modeling.configuration_hybrid_ssm import config_field_names

        known = set(config_field_names())
        unknown = sorted(set(self.mixer_settings) - known)
        if unknown:
            raise ValueError(f"`mixer_settings` has unknown HybridSSMConfig fields {unknown}")

    def _validate_readout(self) -> None:
        """The layers the adapter reads and writes, its readout, and the classifier's labels."""
        if isinstance(self.layer_index, bool) or not isinstance(self.layer_index, int):
            raise ValueError(f"`layer_index` must be an int (negative counts from the end), got {self.layer_index!r}")
        if self.readout not in READOUTS:
            raise ValueError(f"`readout` must be one of {list(READOUTS)}, got {self.readout!r}")
        if self.write_layer_index is not None:
            if isinstance(self.write_layer_index, bool) or not isinstance(self.write_layer_index, int):
                raise ValueError(
                    "`write_layer_index` must be None (write where the adapter reads) or an int (negative counts "
                    f"from the end), got {self.write_layer_index!r}"
                )
            if self.readout != "lm_head":
                raise ValueError(
                    f"`write_layer_index` needs readout='lm_head' (the classifier readout writes nothing into the "
                    f"base), got readout={self.readout!r}"
                )
        if not isinstance(self.classifier_per_head, bool):
            raise ValueError(f"`classifier_per_head` must be True or False, got {self.classifier_per_head!r}")
        if self.readout == "classifier" or self.classifier_per_head:
            if isinstance(self.num_labels, bool) or not isinstance(self.num_labels, int) or self.num_labels < 1:
                raise ValueError(
                    "`num_labels` must be an int >= 1 with readout='classifier' or classifier_per_head=True, got "
                    f"{self.num_labels!r}"
                )
        if self.classifier_per_head and self.mixer != "pd_ssm":
            raise ValueError(
                f"`classifier_per_head` reads every PD-SSM head's state: it needs mixer='pd_ssm', got {self.mixer!r}"
            )

    def _validate_transition_tokens(self) -> None:
        """`transition_token_ids`: a non-empty list of distinct token ids, kept sorted."""
        ids = self.transition_token_ids
        if not (
            isinstance(ids, (list, tuple))
            and ids
            and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
        ):
            raise ValueError(
                "`transition_token_ids` must be None (every token is a step) or a non-empty list of token ids "
                f"(ints >= 0), got {ids!r}"
            )
        if len(set(ids)) != len(ids):
            raise ValueError(
                f"`transition_token_ids` has repeated ids: {sorted(i for i in set(ids) if ids.count(i) > 1)}"
            )
        self.transition_token_ids = sorted(ids)

    def resolved_layer_index(self, num_layers: int) -> int:
        """The 0-based decoder layer the adapter follows in a base with `num_layers` layers."""
        index = self.layer_index + num_layers if self.layer_index < 0 else self.layer_index
        if not 0 <= index < num_layers:
            raise ValueError(
                f"`layer_index` = {self.layer_index} is out of range for a base with {num_layers} decoder layers "
                f"(accepted: {-num_layers} .. {num_layers - 1})"
            )
        return index

    def resolved_write_layer_index(self, num_layers: int) -> int:
        """The 0-based decoder layer after which the adapter's update is added (its read layer when
        `write_layer_index` is None); ValueError when it is out of range or before the read layer."""
        read = self.resolved_layer_index(num_layers)
        if self.write_layer_index is None:
            return read
        index = self.write_layer_index + num_layers if self.write_layer_index < 0 else self.write_layer_index
        if not read <= index < num_layers:
            raise ValueError(
                f"`write_layer_index` = {self.write_layer_index} must name a decoder layer at or after the read layer "
                f"{read} (`layer_index` = {self.layer_index}) of a base with {num_layers} layers "
                f"(accepted: {read} .. {num_layers - 1}, or {read - num_layers} .. -1)"
            )
        return index

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SSMAdapterConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names - {"hf_ssm_version"})
        if unknown:
            raise ValueError(f"adapter config has unknown fields {unknown}; accepted: {sorted(names)}")
        data = {k: v for k, v in data.items() if k in names}
        entity = data.get("entity_settings")
        if data.get("kind") == "entity_tracking" and isinstance(entity, dict) and "story_ends_at_options" not in entity:
            data["entity_settings"] = {**entity, "story_ends_at_options": False}  # saved before it: as it computed
        return cls(**data)

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        from ..version import __version__

        path = Path(directory) / ADAPTER_CONFIG_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**self.to_dict(), "hf_ssm_version": __version__}, indent=2) + "\n")
        return path

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> SSMAdapterConfig:
        path = Path(directory) / ADAPTER_CONFIG_NAME
        if not path.is_file():
            raise ValueError(f"no {ADAPTER_CONFIG_NAME} in {str(directory)!r}: not an SSM adapter folder")
        data = json.loads(path.read_text())
        if data.get("adapter_type") != ADAPTER_TYPE:
            raise ValueError(
                f"{path} has adapter_type {data.get('adapter_type')!r}, not {ADAPTER_TYPE!r} "
                "(a PEFT adapter loads with peft.PeftModel.from_pretrained instead)"
            )
        return cls.from_dict(data)


__all__ = [
    "ADAPTER_CONFIG_NAME",
    "ADAPTER_KINDS",
    "ADAPTER_WEIGHTS_NAME",
    "ENTITY_DEFAULTS",
    "READOUTS",
    "SSMAdapterConfig",
]
