"""Training recipes of the state-tracking driver (docs/design.md §8.3): named sets of `StateTrackingSettings` values.

The driver's default is per mixer (`default_recipe`): `table` for PD-SSM, `residual` for every other mixer (the
baselines). An explicit `--recipe` applies to every run.

- `table` (issue 28; PD-SSM's default): the minimal automaton of scripts/reference_automaton.py as the package's
  layer, its free per-token table included. `direct` with the token embedding frozen at one-hot codes
  (`embedding_init="one_hot"`) and no norm in front of W_P, so that token v's logits W_P e_v are column v of W_P: a
  free N x N table per head and token, N(0, 1) entries (init scale sqrt(d) = 16) stepped by Adam at the full 1e-2
  (`transition_lr_scale` 1); C the identity, frozen, and the block `mixer_only`, so that the model's final RMSNorm and
  the classifier read the one-hot states themselves (a LayerNorm there, as in `direct`'s post-norm block, took the
  reference from 9 of 10 seeds to 3 of 10 on A5: RESULTS.md). No early stop before step 300: at step 50 parity's
  validation is already 100 % with a model that is not exact at 1,000. Up to 3 restarts (seeds s, s + 1000,
  s + 2000), the next one only when a run ends below 100 % validation. Needs hidden_size >= the task's vocabulary
  (every formal task's is tiny).
- `residual` (the baselines' default; PD-SSM's default before issue 28, then named `default`): the settings'
  own defaults. One pre-norm residual layer with SwiGLU, d = 64; for PD-SSM 16 heads of N = 8, K = 16, the
  pure-automaton dictionary layer (D = 1, no input map B: `pd_ssm_diagonal="unit"`, `pd_ssm_input="none"`,
  x_0 = e_0); every prefix labelled, AdamW lr 1e-2 without weight decay, 50 warm-up steps then cosine to 0,
  gradient clipping at 1, 1,000 steps, 3 restarts (a baseline: 1, the driver's --baseline_restarts).
- `direct` (issue 28): the minimal automaton of scripts/reference_automaton.py as a layer. One post-norm mixer-only
  PD-SSM layer (`block_type="post_norm_mixer"`), d = 256, the same 16 automaton heads of N = 8, whose transitions
  are read straight off the token: P_t = column argmax of W_P RMSNorm(u_t) (`pd_ssm_transition="direct"`,
  `pd_ssm_transition_norm`: the norm's gain trained), W_P starting at N(0, 0.02^2) (init scale 0.32 = 0.02 sqrt(d):
  N(0, 0.1) logits); the states reach the classifier through a frozen random C (N(0, 0.02^2), not trained; the
  block's LayerNorm then undoes its scale) and no D_skip u. The token embedding is frozen at its init
  (`freeze_embedding`), W_P learns at 1e-2 / d (`transition_lr_scale` = 1/256: one Adam step then moves a token's
  logits about as far as a step of a free per-token table); Adam at a constant 1e-2 (`lr_schedule="constant"`, no
  warm-up, no clipping); training stops only at 100 % validation, within 2,000 steps. Every other value as `residual`.
  (With C the identity and W_P ~ N(0, 1/d) instead, A5's seed 3 was not learnt.) On A5 it learns 1 seed of 5 where
  `residual` learns 3 (RESULTS.md): an experiment.
- `paper`: the PD-SSM authors' released state-tracking protocol as closely as this package allows: two
  post-norm mixer-only PD-SSM blocks (`block_type="post_norm_mixer"`, dropout 0.01), d = N = 128, one head,
  K = 8, x_0 = e_0, the paper's layer (complex D, b_t = B u_t); last-token supervision; AdamW lr 2e-3, weight
  decay 0.01 except on the embedding; linear warm-up over 10 % of the steps, then cosine to 1e-5 (transformers' get_cosine_with_min_lr_schedule_with_warmup);
  batch 256 of fresh samples every step; no gradient clipping; validation on 8 x 1,024 = 8,192 sequences at
  lengths 40-256 every 5,000 steps; stop once validation reaches 99.95 %; up to 100,000 steps; one seed per run
  (no restarts: seeds are reported one by one).

Precedence (`resolve_settings`): the settings' defaults, then the recipe's values, then every value given
explicitly (a command-line flag), which always wins. Under `table` and `direct` hidden_size follows the heads,
d = 2 H N (256 for 16 heads of N = 8, 512 for 32), unless it is given; W_P's init scale stays the recipe's (for
`table`, entries N(0, 256 / d)). A recipe's warm-up is a fraction of `max_steps`, computed
after the explicit values are in, unless `warmup_steps` itself is given.
"""

from __future__ import annotations

RECIPE_NAMES = ("table", "residual", "direct", "paper")
DEFAULT_RECIPE = "table"  # PD-SSM runs
BASELINE_RECIPE = "residual"  # every other mixer
# Recipe names that were renamed: refused with the new name in the message.
RENAMED_RECIPES = {"default": "residual"}

_DIRECT = dict(
    num_heads=16,
    state_size=8,  # d = 2 H N = 256 unless hidden_size is given (C is square): resolve_settings
    block_type="post_norm_mixer",
    pd_ssm_transition="direct",
    pd_ssm_transition_init_scale=0.32,  # W_P ~ N(0, 0.02^2) at d = 256
    pd_ssm_transition_norm=True,
    pd_ssm_output_skip=False,
    pd_ssm_output_trainable=False,  # C stays at its random N(0, 0.02^2) init
    freeze_embedding=True,
    transition_lr_scale=1 / 256,  # 1 / d
    lr_schedule="constant",
    warmup_steps=0,
    grad_clip=0.0,
    target_accuracy=1.0,
    max_steps=2000,
)

RECIPES: dict[str, dict] = {
    "table": {  # `direct` with the reference automaton's free per-token table and an RMSNorm readout
        **_DIRECT,
        "block_type": "mixer_only",
        "pd_ssm_transition_init_scale": 16.0,  # sqrt(d): W_P's entries, hence the table's logits, N(0, 1)
        "pd_ssm_transition_norm": False,  # W_P reads e_v itself: column v of W_P is token v's table
        "pd_ssm_output_init": "identity",
        "embedding_init": "one_hot",
        "transition_lr_scale": 1.0,  # a table entry's own Adam step, as the reference's
        "min_steps": 300,  # parity reaches 100 % validation at step 50 with a model not yet exact at 1,000 (99.2 %)
    },
    "residual": {},
    "direct": _DIRECT,
    "paper": dict(
        pattern="SS",
        hidden_size=128,
        state_size=128,
        num_heads=1,
        dict_size=8,
        pd_ssm_initial_state="one_hot",
        pd_ssm_diagonal="complex",
        pd_ssm_input="projection",
        block_type="post_norm_mixer",
        block_dropout=0.01,
        supervision="last",
        learning_rate=2e-3,
        weight_decay=0.01,
        decay_embedding=False,
        lr_schedule="cosine_with_min_lr",
        min_learning_rate=1e-5,
        grad_clip=0.0,
        batch_size=256,
        max_steps=100_000,
        eval_every=5_000,
        validation_lengths="test",
        num_buckets=8,
        val_samples_per_bucket=1024,
        target_accuracy=0.9995,
        restarts=1,
    ),
}
# Recipes whose hidden_size follows the heads: d = 2 H N (C maps the heads' [Re x, Im x] onto d, square), unless
# hidden_size is given.
SQUARE_OUTPUT_RECIPES = frozenset({"table", "direct"})
# Warm-up as a fraction of max_steps, per recipe (None: the `warmup_steps` value as it stands); a recipe with a
# fraction sets its own max_steps (an explicit --max_steps overrides it).
WARMUP_FRACTIONS: dict[str, float | None] = {"table": None, "residual": None, "direct": None, "paper": 0.1}


def default_recipe(mixer: str) -> str:
    """The recipe a run of `mixer` takes when none is given: `table` for PD-SSM, `residual` for a baseline.

    `table`'s frozen one-hot embedding and mixer-only block build PD-SSM as an automaton; another mixer gets the
    ordinary residual block (and its 1,000 steps: under `table` a baseline, never at 100 %, would train 2,000)."""
    return DEFAULT_RECIPE if mixer == "pd_ssm" else BASELINE_RECIPE


def check_recipe(recipe: str) -> None:
    """Refuse an unknown recipe name, naming the accepted ones (and the new name of a renamed one)."""
    if recipe in RECIPES:
        return
    renamed = f" (`{recipe}` is now called `{RENAMED_RECIPES[recipe]}`)" if recipe in RENAMED_RECIPES else ""
    raise ValueError(f"`recipe` must be one of {list(RECIPE_NAMES)}, got {recipe!r}{renamed}")


def resolve_settings(recipe: str, explicit: dict) -> dict:
    """The StateTrackingSettings field values of `recipe` with the `explicit` ones on top (they always win)."""
    check_recipe(recipe)
    values = {**RECIPES[recipe], **explicit, "recipe": recipe}
    if recipe in SQUARE_OUTPUT_RECIPES and "hidden_size" not in explicit:
        values["hidden_size"] = 2 * values["num_heads"] * values["state_size"]
    fraction = WARMUP_FRACTIONS[recipe]
    if fraction is not None and "warmup_steps" not in explicit:
        values["warmup_steps"] = round(fraction * values["max_steps"])
    return values
