"""The experimental config fields: study knobs kept outside HybridSSMConfig's stable fields (docs/models.md).

Each of these served one study; no recipe, preset, released model card or published figure depends on them. They
are accepted, checked, saved and reloaded like any field (the pd_ssm mixer declares them in mixer_registry.py as its
`config_fields`, so `HybridSSMConfig(pd_ssm_shared_selection=True)`, `--extra_config`, an adapter's
`mixer_settings` and a saved config.json all take them), but they are not part of the stable interface: a release
may change or remove one without a deprecation period. A removed one moves into
legacy_names.REMOVED_CONFIG_FIELDS, so that an old config.json that set it to anything but its default is refused
by name instead of building a different layer.

This module imports nothing (the mixer registry reads it when the config is imported).
"""

from __future__ import annotations

# field -> (default, what it does). The checks are in mixer_registry._check_pd_ssm, the use in pd_transitions.py.
EXPERIMENTAL_FIELDS: dict[str, tuple[object, str]] = {
    "pd_ssm_identity_entry_logit": (
        None,
        "None or a number L; dictionary and bank transitions only. Entry 0 of every head's dictionary (bank) starts "
        "as the identity scores (P = I), the other entries keep their random start, and the selection W_s u_t + c "
        "gains a trainable bias c starting at L for entry 0 and 0 elsewhere: every token starts by leaving the "
        "state alone. Adds the parameter `selection.bias`.",
    ),
    "pd_ssm_shared_selection": (
        False,
        "bank transitions only: one choice among the K entries per token for all heads (W_s: d -> K) instead of "
        "one per head (W_s: d -> H K). Changes `selection.weight`'s shape.",
    ),
    "pd_ssm_transition_input_size": (
        None,
        "None (all d features) or k in [1, hidden_size]; direct transitions only: W_P reads the first k features "
        "of u_t (W_P: k -> H N^2, starting N(0, s^2 / k)).",
    ),
}

# {field: default}, the form MixerSpec.config_fields takes
EXPERIMENTAL_DEFAULTS = {name: default for name, (default, _) in EXPERIMENTAL_FIELDS.items()}

__all__ = ["EXPERIMENTAL_DEFAULTS", "EXPERIMENTAL_FIELDS"]
