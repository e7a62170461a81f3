"""Every state-tracking figure RESULTS.md publishes is one product command: the command, run through the driver's
own parser, trains exactly the settings recorded for that figure in results/state_tracking/summary.json.

A record holds the recipe it ran and the settings that differed from it (`summary.recipe_overrides`), so the
recorded run's settings are `resolve_settings(record["recipe"], record["overrides"])`."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from hf_ssm.training.state_tracking.recipes import resolve_settings
from hf_ssm.training.state_tracking.settings import StateTrackingSettings
from model_checks import load_script

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "results" / "state_tracking" / "summary.json"

# The matrix commands' shared settings (RESULTS.md §5): in-distribution and longer test lengths for selective copying,
# compression's in-distribution test
SELECTIVE_COPYING = (
    "--task selective_copying --recipe residual --train_min_length 32 --train_max_length 64 --test_min_length 32 "
    "--test_max_length 128 --num_buckets 3 --seeds 0-2 "
)
COMPRESSION = (
    "--task compression --recipe residual --train_max_length 41 --test_min_length 21 --test_max_length 41 "
    "--num_buckets 2 --seeds 0-2 "
)

# (the figure, the product command's arguments, the records of that figure: run-folder prefix, num_generators)
PUBLISHED = [
    ("parity, 5 seeds", "--task parity --seeds 0-4", "runs/experiments/table_parity/", None),
    ("even pairs, 5 seeds", "--task even_pairs --seeds 0-4", "runs/experiments/table_even_pairs/", None),
    (
        "cycle navigation, 5 seeds",
        "--task cycle_navigation --seeds 0-4",
        "runs/experiments/table_cycle_navigation/",
        None,
    ),
    ("A5 k = 2, 5 seeds", "--task a5 --seeds 0-4", "runs/experiments/table_a5/", None),
    ("A5 k = 6, 5 seeds", "--task a5 --num_generators 6 --seeds 0-4", "runs/experiments/table_a5_k6", 6),
    ("S5 k = 2, 5 seeds", "--task s5 --num_generators 2 --seeds 0-4", "runs/experiments/table_wide_s5_k2/", 2),
    ("S5 k = 4, 5 seeds", "--task s5 --num_generators 4 --seeds 0-4", "runs/experiments/table_wide_s5_k4/", 4),
    (
        "modular arithmetic, 5 seeds",
        "--task modular_arithmetic --seeds 0-4",
        "runs/experiments/table_curriculum_modular_arithmetic/",
        None,
    ),
    (
        "baselines at state width 16",
        "--tasks parity,even_pairs,cycle_navigation,modular_arithmetic,a5 --mixers diag_lru,bd_lru,h_lru,attention "
        "--recipe residual_narrow --seed 0",
        "runs/experiments/baselines_narrow/",
        None,
    ),
    (
        "baselines, A5 k = 6",
        "--task a5 --num_generators 6 --mixers diag_lru,bd_lru,attention --seed 0",
        "runs/experiments/baselines_a5_k6/",
        6,
    ),
    (
        "baselines, S5 k = 2",
        "--task s5 --num_generators 2 --mixers diag_lru,bd_lru,attention --seed 0",
        "runs/experiments/baselines_s5_k2/",
        2,
    ),
    (
        "baselines, S5 k = 4",
        "--task s5 --num_generators 4 --mixers diag_lru,bd_lru,attention --seed 0",
        "runs/experiments/baselines_s5_k4/",
        4,
    ),
    ("README main job", "", "runs/experiments/readme_job_s0/", None),
    (
        "S5 k = 32, teacher forcing, 3 seeds",
        "--task s5 --num_generators 32 --recipe table_forced --mixers pd_ssm --seeds 0-2",
        "runs/experiments/table_forced_s5_k32/",
        32,
    ),
    (
        "S3-S5, LSTM against the LRUs with m = 4",
        "--tasks s3,s4,s5 --mixers lstm,bd_lru,h_lru --lru_group_size 4 --seeds 0-2",
        "runs/experiments/permutations_m4/",
        None,
    ),
    (
        "S3-S5, the LRUs with m = 2",
        "--tasks s3,s4,s5 --mixers bd_lru,h_lru --lru_group_size 2 --seeds 0-2",
        "runs/experiments/permutations_m2/",
        None,
    ),
    (
        "compression, in-distribution",
        "--task compression --mixers lstm,bd_lru,h_lru,diag_lru,attention --train_max_length 41 --test_min_length 21 "
        "--test_max_length 41 --num_buckets 2 --seeds 0-2",
        "runs/experiments/compression/",
        None,
    ),
    (
        "S3-S5, BD-LRU with m = 8",
        "--tasks s3,s4,s5 --mixers bd_lru --lru_group_size 8 --seeds 0-2",
        "runs/experiments/permutations_m8/",
        None,
    ),
    (
        "selective copying, one block per mixer",
        SELECTIVE_COPYING + "--mixers lstm,bd_lru,h_lru,diag_lru,attention,pd_ssm",
        "runs/experiments/selective_copying/",
        None,
    ),
    (
        "selective copying, two layers of one mixer",
        SELECTIVE_COPYING + "--mixers lstm,diag_lru,pd_ssm,attention --pattern SS --restarts 1",
        "runs/experiments/selective_copying_two_layers/",
        None,
    ),
    (
        "selective copying, hybrids",
        SELECTIVE_COPYING + "--mixers lstm,diag_lru --pattern SA --restarts 1",
        "runs/experiments/selective_copying_hybrids/",
        None,
    ),
    (
        "compression, two layers of one mixer",
        COMPRESSION + "--mixers lstm,diag_lru,pd_ssm,attention --pattern SS",
        "runs/experiments/compression_two_layers/",
        None,
    ),
    (
        "compression, hybrids",
        COMPRESSION + "--mixers lstm,diag_lru,pd_ssm --pattern SA --restarts 1",
        "runs/experiments/compression_hybrids/",
        None,
    ),
]

# Settings a published command may differ in from its record, and why none changes the figure:
# - recipe: a label; a record that spelled out a task's recipe as flags names the recipe it started from;
# - seed: a restart's record carries the restart's seed (s + 1000 r); the command names the first;
# - restarts: the records of the A5 k = 6, S5 and modular-arithmetic figures are single runs (restarts 1), each
#   seed's restart recorded as its own run; the command's restarts train the same first run and start the
#   same restart (seed s + 1000) exactly when that run ended below 100 % validation.
NOT_COMPARED = {"recipe", "seed", "restarts"}


def _records(prefix: str) -> list[dict]:
    records = [r for r in json.loads(SUMMARY.read_text()) if r["run"].startswith(prefix)]
    assert records, f"no record in {SUMMARY} under {prefix}"
    return records


def _planned(argv: str) -> dict[tuple[str, str, int], StateTrackingSettings]:
    driver = load_script("train_state_tracking")
    parser = driver.build_parser()
    _, runs = driver.plan_runs(parser, parser.parse_args(argv.split()))
    return {(s.task, s.mixer, s.seed): s for s, _ in runs}


def _comparable(settings: dict, mixer: str) -> dict:
    # PD-SSM's own fields (extra_config keys; older records held them as settings) do not enter a model without a
    # PD-SSM layer (a baseline's records carry whatever the recipe of the day set there)
    def pd_field(key: str) -> bool:
        return mixer != "pd_ssm" and key.startswith("pd_ssm_")

    out = {k: v for k, v in settings.items() if k not in NOT_COMPARED and not pd_field(k)}
    out["extra_config"] = {k: v for k, v in out["extra_config"].items() if not pd_field(k)}
    return out


@pytest.mark.parametrize(("figure", "argv", "prefix", "num_generators"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_published_command_trains_the_recorded_settings(figure, argv, prefix, num_generators):
    """The product command of each published figure resolves, run by run, to the settings of the records behind
    the figure (every field but those in NOT_COMPARED)."""
    planned = _planned(argv)
    for record in _records(prefix):
        first_seed = record["seed"] % 1000
        settings = planned.get((record["task"], record["mixer"], first_seed))
        assert settings is not None, f"{figure}: the command does not train {record['run']}"
        recorded = StateTrackingSettings(
            task=record["task"],
            mixer=record["mixer"],
            num_generators=num_generators,
            **resolve_settings(record["recipe"], record.get("overrides") or {}),
        )
        assert _comparable(asdict(settings), record["mixer"]) == _comparable(asdict(recorded), record["mixer"]), (
            figure,
            record["run"],
        )


def test_every_published_record_is_cited():
    """results/state_tracking/summary.json keeps only the records of published figures (nothing superseded)."""
    prefixes = [p[2] for p in PUBLISHED]
    stray = [r["run"] for r in json.loads(SUMMARY.read_text()) if not r["run"].startswith(tuple(prefixes))]
    assert stray == []
