"""The drivers' command-line pieces: --seeds ranges (`cli.seed_list`) and the titled option groups of --help
(`cli.group_options`)."""

from __future__ import annotations

import argparse

import pytest

from hf_ssm.training.cli import group_options, seed_list
from model_checks import load_script


@pytest.mark.parametrize(
    ("text", "seeds"), [("0-4", [0, 1, 2, 3, 4]), ("3", [3]), ("0,2,5", [0, 2, 5]), ("1000-1001,3", [1000, 1001, 3])]
)
def test_seed_list_reads_ranges_and_lists(text, seeds):
    """--seeds 0-4 is seeds 0 to 4 inclusive; items may mix single seeds and ranges."""
    assert seed_list(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4-0", "low <= high"),
        ("-1", "integers and ranges"),
        ("a-b", "integers and ranges"),
        ("0-2,2", "given twice"),
        (",", "no seed"),
    ],
)
def test_seed_list_refuses_bad_ranges_naming_the_flag(text, message):
    """A descending range, a negative seed, a non-integer, a repeated seed or no seed is refused, naming --seeds."""
    with pytest.raises(argparse.ArgumentTypeError, match="--seeds") as err:
        seed_list(text)
    assert message in str(err.value)


def test_group_options_refuses_a_stale_option_name():
    """A group naming an option the parser does not have is an error (a renamed option cannot vanish from --help)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--a")
    with pytest.raises(ValueError, match="does not have"):
        group_options(parser, {"group": ("a", "b")})


def test_state_tracking_help_puts_every_option_in_a_titled_group():
    """Every option that train_state_tracking.py's --help lists is under a title; only --help stays in "other
    options" (the old PD-SSM flags, now --extra_config keys, are hidden: they only refuse with the new spelling)."""
    driver = load_script("train_state_tracking")
    parser = driver.build_parser()
    other = next(g for g in parser._action_groups if g.title == "other options")
    assert [a.dest for a in other._group_actions if a.help is not argparse.SUPPRESS] == ["help"]
    titles = [g.title for g in parser._action_groups if g._group_actions]
    assert titles[0] == "run" and titles[-1] == "other options"
    assert "experimental (set by the recipes)" in parser.format_help()


def test_state_tracking_seeds_train_one_folder_per_seed(tmp_path):
    """--seeds 0-1 plans the same runs as --seed 0 and --seed 1, each in its own s<seed>/ folder; --seed with
    --seeds is refused."""
    driver = load_script("train_state_tracking")
    parser = driver.build_parser()
    _, runs = driver.plan_runs(
        parser,
        parser.parse_args(["--task", "parity", "--mixer", "pd_ssm", "--seeds", "0-1", "--output_dir", str(tmp_path)]),
    )
    assert [(s.seed, d) for s, d in runs] == [(0, tmp_path / "s0"), (1, tmp_path / "s1")]
    _, single = driver.plan_runs(parser, parser.parse_args(["--task", "parity", "--mixer", "pd_ssm", "--seed", "1"]))
    assert single[0][0] == runs[1][0]
    with pytest.raises(SystemExit):
        driver.plan_runs(parser, parser.parse_args(["--task", "parity", "--seed", "1", "--seeds", "0-1"]))
