"""Training recipes of the state-tracking driver (docs/design.md §8.3): named sets of `StateTrackingSettings` values,
one table (`RECIPES`), so that every published figure is `train_state_tracking.py --task TASK --seed S`.

Without `--recipe` a PD-SSM run takes its task's recipe (`default_recipe`: `TASK_RECIPES`, else `table`) and every
other mixer `residual` (the baselines). An explicit `--recipe` applies to every run.

- `table` (PD-SSM's default): the minimal automaton of scripts/reference_automaton.py as the package's layer, its
  free per-token table included. `direct` with the token embedding frozen at one-hot codes
  (`embedding_init="one_hot"`) and no norm in front of W_P, so that token v's logits W_P e_v are column v of W_P: a
  free N x N table per head and token, N(0, 1) entries (init scale sqrt(d) = 16) stepped by Adam at the full 1e-2
  (`pd_ssm_transition_lr_scale` 1); C the identity, frozen, and the block `mixer_only`, so that the model's final RMSNorm and
  the classifier read the one-hot states themselves (a LayerNorm there, as in `direct`'s post-norm block, took the
  reference from 9 of 10 seeds to 3 of 10 on A5: docs/design.md §8.3). No early stop before step 300: at step 50
  parity's validation is already 100 % with a model that is not exact at 1,000. Up to 3 restarts (seeds s, s + 1000,
  s + 2000), the next one only when a run ends below 100 % validation. The test adds 256 sequences of exactly 1,000
  and 4,000 steps (`far_lengths`). Needs hidden_size >= the task's vocabulary (every formal task's is tiny).
- `table_wide` (S5's default): `table` with 32 heads, d = 512 (S5's 120 states: 16 heads found the group on 1 of 3
  reference seeds, 32 on 3 of 3).
- `table_curriculum` (modular arithmetic's default): `table` with 8 heads of N = 64 (one head can hold the 50-state
  DFA), d = 16 (C: 1,024 -> 16, trained; W_P's init scale sqrt(16)), the length curriculum over the first 1,500 of
  at most 3,000 steps, validation every 250 steps, one run per seed, far lengths 1,001 and 4,001 (the task's lengths
  are odd). Without the curriculum the reference automaton stays at chance.
- `table_forced` (S5 with 32 generators, where `table_wide` and every published model stay at chance): `table` as
  one head of N = 120 states, S5's order (another group: `--state_size` its order), trained with teacher forcing
  (`teacher_forcing_steps`, teacher_forcing.py) for all of its at most 1,500 steps: every position starts from the
  state its previous label names, and the classifier is fixed at "state k is class k". Validation (every 100 steps)
  and test run free, one run per seed.
- `hybrid` (recall and tracking in one model; an experiment, docs/design.md §8.7): `table`'s PD-SSM layer, then an
  attention layer (`pattern="SA"`), both in pre-norm residual blocks with SwiGLU, d = 256 (the one-hot embedding
  needs d >= the vocabulary). W_P now reads RMSNorm(e_v) = sqrt(d) e_v, so its init scale is 1 (N(0, 1) logits,
  as `table`'s 16 gives without the norm; at 16 they would start at std 16, saturated). `--pattern SS` and
  `--mixers attention --pattern SS` give the single-mixer models of the same recipe, with as many trained
  parameters.
- `hybrid_block` (docs/design.md §8.8, the ladder's layer): the PD-SSM layer where a user puts it. `table`'s layer
  (direct transitions, the pure automaton, C the frozen identity) reading a trained token embedding (one-hot at the
  start) through the pre-norm residual block with SwiGLU, then an attention layer (`pattern="SA"`; `--pattern AS` or
  `SASA` put attention first or stack four), 32 heads of N = 8 (d = 512). Everything trains at a constant 1e-3 but
  W_P, which trains at 1e-2 / sqrt(d) (`pd_ssm_transition_lr_scale` follows the rate and the width:
  `transition_lr_scale`): behind the RMSNorm W_P reads sqrt(d) e_v, so its init scale is 1 and a full step would move
  its entries sqrt(d) times as far as `table`'s. First runs only (`restarts` 1).
- `hybrid_block_wide`: `hybrid_block` with 64 heads of N = 8 read through a frozen random C (N(0, 0.02^2), 1,024 ->
  d = 512, so the block keeps its width and step time) and every rate at 1e-2 (W_P still at 1e-2 / sqrt(d)). The
  breadth of the search that `hybrid_block` lacks: its failed seeds stop with one to three heads on automata whose
  joint state does not name the element (docs/design.md §8.8).
- `hybrid_recall`: `hybrid` on multi-query associative recall at the claim's sizes: 256 tokens (127 keys, 127
  values), training on 4-80 pairs, test buckets 16-80 pairs (the last 65-80), no far lengths (the length is
  fixed); Adam at 3e-3 after 50 warm-up steps, cosine decay, gradient clipping at 1, at most 3,000 steps,
  validation and checkpoints every 250, one run per seed. So far (§8.7), on a small recall, two attention layers learn
  under it and SA does not (it plateaus at 1 / (number of pairs), a value of the context); three layers need 1e-3,
  where SA's extension SAA (`--pattern SAA --learning_rate 1e-3`) learns.
- `residual` (the baselines' default): the settings' own defaults. One pre-norm residual layer with SwiGLU, d = 64;
  for PD-SSM 16 heads of N = 8, K = 16, the pure-automaton dictionary layer (D = 1, no input map B:
  `pd_ssm_diagonal="unit"`, `pd_ssm_input="none"`, x_0 = e_0); every prefix labelled, AdamW lr 1e-2 without weight
  decay, 50 warm-up steps then cosine to 0, gradient clipping at 1, 1,000 steps, 3 restarts (a baseline: 1, the
  driver's --baseline_restarts). A baseline's state width is matched to 16 heads of N = 8: 256 real numbers.
- `residual_narrow`: `residual` with one head, so a baseline's state is 2 N = 16 real numbers (the baseline table of
  RESULTS.md §1).
- `direct`: the minimal automaton of scripts/reference_automaton.py as a layer. One post-norm mixer-only PD-SSM layer
  (`block_type="post_norm_mixer"`), d = 256, the same 16 automaton heads of N = 8, whose transitions are read
  straight off the token: P_t = column argmax of W_P RMSNorm(u_t) (`pd_ssm_transition="direct"`,
  `pd_ssm_transition_norm`: the norm's gain trained), W_P starting at N(0, 0.02^2) (init scale 0.32 = 0.02 sqrt(d):
  N(0, 0.1) logits); the states reach the classifier through a frozen random C (N(0, 0.02^2), not trained; the
  block's LayerNorm then undoes its scale) and no D_skip u. The token embedding is frozen at its init
  (`freeze_embedding`), W_P learns at 1e-2 / d (`pd_ssm_transition_lr_scale` = 1/256: one Adam step then moves a token's
  logits about as far as a step of a free per-token table); Adam at a constant 1e-2 (`lr_schedule="constant"`, no
  warm-up, no clipping); training stops only at 100 % validation, within 2,000 steps. Every other value as
  `residual`. On A5 it learns 1 seed of 5 where `residual` learns 3 (docs/design.md §8.3): an experiment.
- `paper`: the PD-SSM authors' released state-tracking protocol as closely as this package allows: two
  post-norm mixer-only PD-SSM blocks (`block_type="post_norm_mixer"`, dropout 0.01), d = N = 128, one head,
  K = 8, x_0 = e_0, the paper's layer (complex D, b_t = B u_t); last-token supervision; AdamW lr 2e-3, weight
  decay 0.01 except on the embedding; linear warm-up over 10 % of the steps, then cosine to 1e-5 (transformers'
  get_cosine_with_min_lr_schedule_with_warmup); batch 256 of fresh samples every step; no gradient clipping;
  validation on 8 x 1,024 = 8,192 sequences at lengths 40-256 every 5,000 steps; stop once validation reaches
  99.95 %; up to 100,000 steps; one seed per run (no restarts: seeds are reported one by one).

Task settings (`TASK_SETTINGS`): the recipes' lengths are the state-tracking tasks' (train 3-40, test 40-256, far
1,000 and 4,000), which the memory tasks and word-problem files cannot take, so each of those has its own data
settings: the lengths, buckets and vocabulary the project publishes it with (RESULTS.md §5 for selective copying and
compression; `hybrid_recall`'s recall at 256 tokens for mqar), no far lengths for mqar (its length is fixed) and
compression (its lengths are odd), none for a file run (its test is the test file).

Precedence (`resolve_settings`): the settings' defaults, then the recipe's values, then the task's settings, then
every value given explicitly (a command-line flag), which always wins. The PD-SSM layer's fields are HybridSSMConfig
fields, so a recipe sets them in `extra_config` (over `MODEL_DEFAULTS`), and `--extra_config KEY=VALUE` overrides
one of them.
Under the square-output recipes (`SQUARE_OUTPUT_RECIPES`) hidden_size follows the heads, d = 2 H N (256 for 16 heads
of N = 8, 512 for 32), unless it is given; W_P's init scale stays the recipe's (for `table`, entries N(0, 256 / d)).
A recipe's warm-up is a fraction of `max_steps`, computed after the explicit values are in, unless `warmup_steps`
itself is given.

A summary record names its recipe and the settings that differ from it (`summary.recipe_overrides`), so a recipe's
values are never changed once a published record cites it: a new protocol is a new recipe.
"""

from __future__ import annotations

from ...data.word_problems import WORD_PROBLEM_TASK
from ..legacy_settings import upgrade_settings
from ..stack import PAPER_PD_SSM_MODE

# The HybridSSMConfig fields every state-tracking model starts from, under its `extra_config` (model_config): the
# paper's layer (the config's defaults when the recipes were written; heads and N are the settings' own) as the pure
# automaton, D = 1, no input map B, x_0 = e_0, a dictionary of K = 16 (a model without a PD-SSM layer ignores them).
MODEL_DEFAULTS = {
    **PAPER_PD_SSM_MODE,
    "pd_ssm_initial_state": "one_hot",
    "pd_ssm_diagonal": "unit",
    "pd_ssm_input": "none",
    "pd_ssm_dict_size": 16,
}
DEFAULT_RECIPE = "table"  # PD-SSM runs of a task without its own recipe
BASELINE_RECIPE = "residual"  # every other mixer
# Recipe names that were renamed: refused with the new name in the message.
RENAMED_RECIPES = {"default": "residual"}

_DIRECT_LAYER = {  # HybridSSMConfig fields of `direct`'s PD-SSM layer
    "pd_ssm_transition": "direct",
    "pd_ssm_transition_init_scale": 0.32,  # W_P ~ N(0, 0.02^2) at d = 256
    "pd_ssm_transition_norm": True,
    "pd_ssm_output_skip": False,
    "pd_ssm_output_trainable": False,  # C stays at its random N(0, 0.02^2) init
    "pd_ssm_transition_lr_scale": 1 / 256,  # 1 / d
}
_DIRECT = dict(
    num_heads=16,
    state_size=8,  # d = 2 H N = 256 unless hidden_size is given (C is square): resolve_settings
    block_type="post_norm_mixer",
    extra_config=_DIRECT_LAYER,
    freeze_embedding=True,
    lr_schedule="constant",
    warmup_steps=0,
    grad_clip=0.0,
    target_accuracy=1.0,
    max_steps=2000,
)

_TABLE = {  # `direct` with the reference automaton's free per-token table and an RMSNorm readout
    **_DIRECT,
    "block_type": "mixer_only",
    "extra_config": {
        **_DIRECT_LAYER,
        "pd_ssm_transition_init_scale": 16.0,  # sqrt(d): W_P's entries, hence the table's logits, N(0, 1)
        "pd_ssm_transition_norm": False,  # W_P reads e_v itself: column v of W_P is token v's table
        "pd_ssm_output_init": "identity",
        "pd_ssm_transition_lr_scale": 1.0,  # a table entry's own Adam step, as the reference's
    },
    "embedding_init": "one_hot",
    "min_steps": 300,  # parity reaches 100 % validation at step 50 with a model not yet exact at 1,000 (99.2 %)
    "far_lengths": "1000,4000",  # an automaton that is right is right at any length: test it far out
}

_HYBRID = {  # `table`'s layer, then attention, in pre-norm residual blocks
    **_TABLE,
    "pattern": "SA",
    "block_type": "pre_norm_residual",
    "extra_config": {**_TABLE["extra_config"], "pd_ssm_transition_init_scale": 1.0},  # W_P reads sqrt(d) e_v
}

# W_P's own rate behind the block's RMSNorm: `table`'s 1e-2 / sqrt(d) (docs/design.md §8.8), as a multiple of the
# recipe's rate (pd_ssm_transition_lr_scale, set by resolve_settings for the recipes of TRANSITION_STEP_RECIPES)
TRANSITION_RATE = 1e-2

_HYBRID_BLOCK = {  # the layer where a user puts it: trained embedding, pre-norm residual blocks, attention after it
    **_TABLE,
    "num_heads": 32,  # d = 2 H N = 512: twice `table`'s search in parallel
    "pattern": "SA",
    "block_type": "pre_norm_residual",
    "freeze_embedding": False,
    "learning_rate": 1e-3,  # attention and the MLPs at 1e-3; W_P at TRANSITION_RATE / sqrt(d)
    "restarts": 1,
    # attention and the SwiGLU blocks silent and frozen for the first 200 steps (hf_ssm.SublayerDelay), so that they
    # cannot fit the training lengths around a half-found automaton (docs/design.md §8.8); 400 steps with them after
    "attention_frozen_steps": 200,
    "mlp_frozen_steps": 200,
    "min_steps": 600,
    "extra_config": {**_TABLE["extra_config"], "pd_ssm_transition_init_scale": 1.0},  # W_P reads sqrt(d) e_v
}

_MQAR = {  # mqar at the claim's sizes: 256 tokens, 127 keys and 127 values, 4-80 pairs
    "task_vocab_size": 256,
    "sequence_length": 256,
    "train_min_length": 4,  # pairs
    "train_max_length": 80,
    "test_min_length": 16,
    "test_max_length": 80,
    "num_buckets": 4,
    "far_lengths": "",  # the sequence length is fixed, and 85 pairs is the most it holds
}

RECIPES: dict[str, dict] = {
    "table": _TABLE,
    "table_wide": {**_TABLE, "num_heads": 32},  # d = 2 H N = 512 (SQUARE_OUTPUT_RECIPES)
    "table_curriculum": {
        **_TABLE,
        "num_heads": 8,
        "state_size": 64,  # one head can hold modular arithmetic's 50-state DFA
        "hidden_size": 16,  # C: 2 H N = 1,024 -> 16, trained (a square, 1,024-wide model costs 64 times more)
        "extra_config": {
            **_TABLE["extra_config"],
            "pd_ssm_transition_init_scale": 4.0,  # sqrt(d): the one-hot tokens' table entries N(0, 1), as in `table`
            "pd_ssm_output_init": "normal",
            "pd_ssm_output_trainable": True,
        },
        "length_curriculum_steps": 1500,
        "max_steps": 3000,
        "eval_every": 250,
        "save_every": 250,
        "restarts": 1,
        "far_lengths": "1001,4001",  # the task's lengths are odd
    },
    "table_forced": {  # `table` as one head of N = the group's order, trained with teacher forcing (S5, 32 generators)
        **_TABLE,
        "num_heads": 1,
        "extra_config": {**_TABLE["extra_config"], "pd_ssm_transition_init_scale": 15.5},  # sqrt(d): N(0, 1) logits
        "state_size": 120,  # S5's order: N = the number of classes (another group: --state_size its order)
        "teacher_forcing_steps": 1500,  # every step; the validation and the test run free
        "max_steps": 1500,
        "eval_every": 100,
        "save_every": 100,
        "restarts": 1,
    },
    "hybrid": _HYBRID,
    "hybrid_block": _HYBRID_BLOCK,
    "hybrid_block_wide": {  # twice the heads, read through a frozen random C back to d = 512, everything at 1e-2
        **_HYBRID_BLOCK,
        "num_heads": 64,
        "hidden_size": 512,  # C: 2 H N = 1,024 -> 512, frozen at N(0, 0.02^2): the block's width and step time stay
        "learning_rate": 1e-2,
        "extra_config": {**_HYBRID_BLOCK["extra_config"], "pd_ssm_output_init": "normal"},
    },
    "hybrid_recall": {
        **_HYBRID,
        **_MQAR,  # the claim's sizes are mqar's own task settings
        "learning_rate": 3e-3,
        # two attention layers bind keys to values in 100 steps with these three, and not in 500 without them
        # (docs/design.md §8.7)
        "warmup_steps": 50,
        "lr_schedule": "cosine",
        "grad_clip": 1.0,
        "max_steps": 3000,
        "eval_every": 250,
        "save_every": 250,
        "restarts": 1,
    },
    "residual": {},
    "residual_narrow": {"num_heads": 1},  # a baseline's state width: 2 N H = 16 real numbers
    "direct": _DIRECT,
    "paper": dict(
        pattern="SS",
        hidden_size=128,
        state_size=128,
        num_heads=1,
        extra_config={
            "pd_ssm_dict_size": 8,
            "pd_ssm_initial_state": "one_hot",
            "pd_ssm_diagonal": "complex",
            "pd_ssm_input": "projection",
        },
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
RECIPE_NAMES = tuple(RECIPES)
# Each memory task's data settings as published (RESULTS.md §5: selective copying, compression; mqar: the recall of
# `hybrid_recall`, 256 tokens, 127 keys and values), and a file run's: over the recipe's values, under explicit ones
# (resolve_settings). A record stores the settings that differ from its recipe, task settings included, so a change
# here never rewrites a published record.
TASK_SETTINGS: dict[str, dict] = {
    "mqar": dict(_MQAR),
    "selective_copying": {
        "train_min_length": 32,  # 2 x 16 data tokens: the shortest context that holds them, then the markers
        "train_max_length": 64,
        "test_min_length": 32,
        "test_max_length": 128,
        "num_buckets": 3,
    },
    "compression": {
        "train_min_length": 3,
        "train_max_length": 41,  # up to 20 symbols to hold
        "test_min_length": 21,
        "test_max_length": 41,
        "num_buckets": 2,
        "far_lengths": "",  # lengths are odd (table's 1,000 and 4,000 are not lengths of the task)
    },
    # a file run's test is its test file's rows: no generator draws far-length sequences (--far_lengths refused)
    WORD_PROBLEM_TASK: {"far_lengths": ""},
}
# PD-SSM's recipe per task where `table` is not enough (RESULTS.md §1): the driver's default for that task.
TASK_RECIPES = {"s5": "table_wide", "modular_arithmetic": "table_curriculum"}
# Recipes whose hidden_size follows the heads: d = 2 H N (C maps the heads' [Re x, Im x] onto d, square), unless
# hidden_size is given.
SQUARE_OUTPUT_RECIPES = frozenset(
    {"table", "table_wide", "table_forced", "hybrid", "hybrid_recall", "hybrid_block", "direct"}
)
# Recipes whose W_P learns at TRANSITION_RATE / sqrt(d) whatever their own rate and width (transition_lr_scale),
# unless pd_ssm_transition_lr_scale is given.
TRANSITION_STEP_RECIPES = frozenset({"hybrid_block", "hybrid_block_wide"})
# Warm-up as a fraction of max_steps, per recipe (None: the `warmup_steps` value as it stands); a recipe with a
# fraction sets its own max_steps (an explicit --max_steps overrides it).
WARMUP_FRACTIONS: dict[str, float] = {"paper": 0.1}


def transition_lr_scale(learning_rate: float, hidden_size: int) -> float:
    """pd_ssm_transition_lr_scale that trains W_P at TRANSITION_RATE / sqrt(d) where the rest trains at
    `learning_rate`: W_P reads the block's RMSNorm(e_v) = sqrt(d) e_v, so its init scale is 1 and its entries are
    sqrt(d) times smaller than `table`'s; the same Adam step would move them sqrt(d) times as far (§8.8)."""
    return round(TRANSITION_RATE / learning_rate * hidden_size**-0.5, 6)


def default_recipe(mixer: str, task: str | None = None) -> str:
    """The recipe a run of `mixer` on `task` takes when none is given: for PD-SSM the task's own recipe
    (`TASK_RECIPES`) or `table`, `residual` for a baseline.

    `table`'s frozen one-hot embedding and mixer-only block build PD-SSM as an automaton; another mixer gets the
    ordinary residual block (and its 1,000 steps: under `table` a baseline, never at 100 %, would train 2,000)."""
    if mixer != "pd_ssm":
        return BASELINE_RECIPE
    return TASK_RECIPES.get(task, DEFAULT_RECIPE)


def check_recipe(recipe: str) -> None:
    """Refuse an unknown recipe name, naming the accepted ones (and the new name of a renamed one)."""
    if recipe in RECIPES:
        return
    renamed = f" (`{recipe}` is now called `{RENAMED_RECIPES[recipe]}`)" if recipe in RENAMED_RECIPES else ""
    raise ValueError(f"`recipe` must be one of {list(RECIPE_NAMES)}, got {recipe!r}{renamed}")


def resolve_settings(recipe: str, explicit: dict, task: str | None = None) -> dict:
    """The StateTrackingSettings field values of `recipe`, the settings of `task` (`TASK_SETTINGS`; `task` None:
    `explicit["task"]`, if any) over them, and the `explicit` ones on top (they always win).

    `extra_config` (HybridSSMConfig fields) merges key by key, the explicit ones over the recipe's (the model
    puts both over MODEL_DEFAULTS: settings.model_config). A field that moved into extra_config
    (legacy_settings.MOVED_TO_EXTRA_CONFIG: `dict_size`, the old `pd_ssm_*` settings) among `explicit` (a record or
    settings.json written before it moved) is read as that extra_config key."""
    check_recipe(recipe)
    explicit = upgrade_settings("StateTrackingSettings", explicit)
    config = {**RECIPES[recipe].get("extra_config", {}), **explicit.get("extra_config", {})}
    own = TASK_SETTINGS.get(task if task is not None else explicit.get("task"), {})
    values = {**RECIPES[recipe], **own, **explicit, "recipe": recipe, "extra_config": config}
    if recipe in SQUARE_OUTPUT_RECIPES and "hidden_size" not in explicit:
        values["hidden_size"] = 2 * values["num_heads"] * values["state_size"]
    if recipe in TRANSITION_STEP_RECIPES and "pd_ssm_transition_lr_scale" not in explicit.get("extra_config", {}):
        config["pd_ssm_transition_lr_scale"] = transition_lr_scale(values["learning_rate"], values["hidden_size"])
    fraction = WARMUP_FRACTIONS.get(recipe)
    if fraction is not None and "warmup_steps" not in explicit:
        values["warmup_steps"] = round(fraction * values["max_steps"])
    return values
