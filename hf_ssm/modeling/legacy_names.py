"""Names that were changed, and what keeps checkpoints saved under the old names loading (docs/design.md §9.1).

Two tables, each old name -> new name:

- `RENAMED_CONFIG_FIELDS`: HybridSSMConfig fields. An old field name is accepted wherever a field is (the
  constructor, `from_dict` / `from_pretrained` and their keyword overrides, `update`, attribute reads and writes,
  an adapter's `mixer_settings`) with a FutureWarning naming the new field; the value is unchanged, only the
  name. A config saved again writes the new names.
- `RENAMED_PARAMETERS`: parameter paths inside a mixer (`mixer.<old>.` -> `mixer.<new>.`). Each old path belongs
  to one mixer family only, so the renaming is unambiguous. `from_pretrained` renames them through transformers'
  `key_mapping`; `rename_legacy_keys` does the same for a state dict loaded by plain torch (SSM adapters). The
  tensors themselves are untouched, so a legacy checkpoint loads bit-identically.

A third table, `REMOVED_CONFIG_FIELDS`, holds HybridSSMConfig fields that were removed (experimental fields go
there when they are dropped: experimental_fields.py). A saved config that still has one at its former default loads
with a FutureWarning naming it (the field changed nothing there); any other value is refused with a ValueError naming
the field and what to do, since the layer it asked for can no longer be built. Nothing is dropped silently.

This module imports nothing (it is read by the config, which the mixer modules import).
"""

from __future__ import annotations

import re
import warnings

RENAMED_CONFIG_FIELDS = {
    "pd_ssm_state_size": "pd_ssm_head_state_size",  # N, the complex state size of each of the H heads
    "lru_state_size": "lru_total_state_size",  # N * m, the whole state of a bd_lru / h_lru / diag_lru layer
    "lru_block_size": "lru_group_size",  # m: BD-LRU's block size, H-LRU's order
    "lrc_state_size": "lrc_num_channels",  # D, the channels of lrc_ssm / gru_ssm / mgu_ssm / lstm_ssm
}

RENAMED_PARAMETERS = {
    "input_proj": "in_proj",  # pd_ssm: B
    "value_proj": "in_proj",  # bd_lru / h_lru / diag_lru: W_v
    "output_proj": "out_proj",  # pd_ssm: C; bd_lru / h_lru / diag_lru: W_o
}

# Removed HybridSSMConfig fields: name -> (its former default, what to do instead). Empty while no field has been
# removed; `drop_removed_fields` applies it wherever a config is built or changed.
REMOVED_CONFIG_FIELDS: dict[str, tuple[object, str]] = {}

# The same renaming as regular expressions over full state-dict keys, in the form of from_pretrained's `key_mapping`.
LEGACY_KEY_MAPPING = {rf"(?<!\w)mixer\.{old}\.": f"mixer.{new}." for old, new in RENAMED_PARAMETERS.items()}
_LEGACY_KEY = re.compile(r"(^|\.)mixer\.(" + "|".join(RENAMED_PARAMETERS) + r")\.")


def warn_renamed_field(old: str, source: str = "HybridSSMConfig") -> str:
    """FutureWarning that config field `old` has a new name; returns the new name."""
    new = RENAMED_CONFIG_FIELDS[old]
    warnings.warn(
        f"{source}: the config field `{old}` is now `{new}` (same value); the old name will stop working in a "
        f"future release",
        FutureWarning,
        stacklevel=3,
    )
    return new


def rename_config_fields(fields: dict, source: str = "HybridSSMConfig") -> dict:
    """`fields` with every old field name replaced by its new one (a FutureWarning each); ValueError where a field
    is given under both names with different values."""
    out = {}
    for key, value in fields.items():
        if key not in RENAMED_CONFIG_FIELDS:
            out.setdefault(key, value)
            continue
        new = warn_renamed_field(key, source)
        if new in fields and fields[new] != value:
            raise ValueError(
                f"{source}: `{key}` (the old name of `{new}`) = {value!r} and `{new}` = {fields[new]!r} disagree; "
                f"give only `{new}`"
            )
        out[new] = value
    return out


def drop_removed_fields(fields: dict, source: str = "HybridSSMConfig") -> None:
    """Take every removed field (REMOVED_CONFIG_FIELDS) out of `fields`, in place: at its former default with a
    FutureWarning naming it, with any other value a ValueError naming the field, the value and what to do."""
    for name in [key for key in fields if key in REMOVED_CONFIG_FIELDS]:
        default, advice = REMOVED_CONFIG_FIELDS[name]
        value = fields[name]
        if value != default or type(value) is not type(default):
            raise ValueError(
                f"{source}: the config field `{name}` was removed, and this config sets it to {value!r} (not its "
                f"former default {default!r}), a layer that can no longer be built: {advice}"
            )
        del fields[name]
        warnings.warn(
            f"{source}: the config field `{name}` was removed; its value here, {default!r}, was the default and "
            "changed nothing, so it was dropped (a config saved again leaves it out)",
            FutureWarning,
            stacklevel=3,
        )


def rename_legacy_keys(state_dict: dict) -> dict:
    """`state_dict` with the parameter paths of RENAMED_PARAMETERS renamed (a FutureWarning if any was)."""
    renamed = {
        _LEGACY_KEY.sub(lambda m: f"{m[1]}mixer.{RENAMED_PARAMETERS[m[2]]}.", k): v for k, v in state_dict.items()
    }
    if list(renamed) != list(state_dict):
        old = sorted({m[2] for k in state_dict for m in _LEGACY_KEY.finditer(k)})
        warnings.warn(
            f"these weights use parameter names from before their renaming ({old} -> "
            f"{[RENAMED_PARAMETERS[o] for o in old]}); they were loaded under the new names",
            FutureWarning,
            stacklevel=2,
        )
    return renamed


__all__ = [
    "LEGACY_KEY_MAPPING",
    "RENAMED_CONFIG_FIELDS",
    "RENAMED_PARAMETERS",
    "REMOVED_CONFIG_FIELDS",
    "drop_removed_fields",
    "rename_config_fields",
    "rename_legacy_keys",
    "warn_renamed_field",
]
