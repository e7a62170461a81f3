"""The adapter presets (hf_ssm/training/adapter/experiment_settings.py): every row of RESULTS.md §2's SmolLM2-135M-Instruct table is
one product command of scripts/train_adapter.py whose settings are those of the runs that produced the row; presets
resolve under the flags given; bad presets are refused; --help lists every option under a title; --seeds trains one
run per seed."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex

import pytest
from test_adapter import TINY_QUICK_RUN

from hf_ssm.adapters.bases import NAMED_BASES
from hf_ssm.training.adapter.experiment_settings import (
    DEFAULT_PRESETS,
    NO_PRESET,
    PRESETS,
    SMOLLM2,
    AdapterExperimentSettings,
    accepted_presets,
    preset_values,
)
from hf_ssm.training.adapter.records import reproduce_flags
from hf_ssm.training.legacy_settings import upgrade_argv
from model_checks import ROOT, load_script, run_script

SUMMARY = ROOT / "results" / "adapter" / "summary.json"
SCRIPT = "python scripts/train_adapter.py"
BASE = f"--base_model {SMOLLM2}"

# RESULTS.md §2, "SmolLM2-135M-Instruct": (table row, record selector (run_dir, method, seed), product command).
# Every record of every row is listed (all seeds). Extra flags after the preset are where the published run itself
# differed from the recipe, each said in a comment.
_PARITY, _CYC, _A5 = f"{BASE} --task parity", f"{BASE} --task cycle_navigation", f"{BASE} --task a5"
_BBH = f"{BASE} --task tracking_shuffled_objects"
_EXP = "runs/experiments"
PUBLISHED = [
    *[
        ("parity: PD-SSM, a readout per head", (f"{_EXP}/sent_par_ph/s{s}", "ssm_classifier", s), f"{_PARITY} --seed {s}")
        for s in range(5)
    ],
    *[
        ("parity: PD-SSM, one readout of all heads", (f"{_EXP}/sent_bank_par/s{s}", "ssm_classifier", s),
         f"{_PARITY} --preset one_readout --seed {s}")
        for s in range(5)
    ],
    # Seed 0 validated every 100 steps; seeds 1 and 2, and the preset, once at the end (800): validation only scores
    # the model (no early stop before step 800 = max_steps), the trained weights are the same.
    ("parity: PD-SSM, LM-head readout", (f"{_EXP}/sent_lm_par/s0", "ssm", 0),
     f"{_PARITY} --preset lm_head --seed 0 --eval_every 100"),
    *[
        ("parity: PD-SSM, LM-head readout", (f"{_EXP}/sent_lm_par/s{s}", "ssm", s), f"{_PARITY} --preset lm_head --seed {s}")
        for s in (1, 2)
    ],
    ("parity: diag_lru adapter", (f"{_EXP}/sent_diag_par/s0", "ssm_classifier", 0), f"{_PARITY} --preset diag_lru --seed 0"),
    ("parity: linear probe", (f"{_EXP}/sent_base_par/s0", "probe", 0), f"{_PARITY} --preset probe --seed 0"),
    ("parity: LoRA", (f"{_EXP}/sent_base_par/s0", "lora_classifier", 0), f"{_PARITY} --preset lora --seed 0"),
    ("parity: untrained base, 4-shot", (f"{_EXP}/sent_base_par/s0", "fewshot", 0), f"{_PARITY} --preset fewshot --seed 0"),
    *[
        ("cycle navigation: PD-SSM, a readout per head, preamble",
         (f"{_EXP}/sent_cyc_pre30/s{s}", "ssm_classifier", s), f"{_CYC} --seed {s}")
        for s in range(5)
    ],
    # the same row's seed 0 re-timed after the scan over sentence ends alone (RESULTS.md cites it as the row's command)
    ("cycle navigation: PD-SSM, a readout per head, preamble",
     (f"{_EXP}/fastscan_cyc_pre30/s0", "ssm_classifier", 0), f"{_CYC} --seed 0"),
    *[
        ("cycle navigation: PD-SSM, LM-head readout, preamble", (f"{_EXP}/sent_lm_cyc/s{s}", "ssm", s),
         f"{_CYC} --preset lm_head_preamble --seed {s}")
        for s in range(3)
    ],
    *[
        ("cycle navigation: PD-SSM, the heads' vote for the LM head", (f"{_EXP}/sent_lm_vote_cyc/s{s}", "ssm", s),
         f"{_CYC} --preset lm_head_vote --seed {s}")
        for s in (0, 1)
    ],
    # seed 2 was not tested at 80 transitions (RESULTS.md: "seed 2 not run at 80")
    ("cycle navigation: PD-SSM, the heads' vote for the LM head", (f"{_EXP}/sent_lm_vote_cyc/s2", "ssm", 2),
     f"{_CYC} --preset lm_head_vote --seed 2 --test_buckets 1-10,40-40"),
    *[
        ("cycle navigation: PD-SSM, a readout per head", (f"{_EXP}/sent_cyc_ph/s{s}", "ssm_classifier", s),
         f"{_CYC} --preset per_head --seed {s}")
        for s in range(5)
    ],
    *[
        ("cycle navigation: PD-SSM, one readout of all heads", (f"{_EXP}/sent_bank_cyc/s{s}", "ssm_classifier", s),
         f"{_CYC} --preset one_readout --seed {s}")
        for s in range(5)
    ],
    ("cycle navigation: diag_lru adapter", (f"{_EXP}/sent_diag_lru_cycle_navigation/s0", "ssm_classifier", 0),
     f"{_CYC} --preset diag_lru --seed 0"),
    ("cycle navigation: LoRA", (f"{_EXP}/sent_lora_classifier_cycle_navigation/s0", "lora_classifier", 0),
     f"{_CYC} --preset lora --seed 0"),
    ("cycle navigation: linear probe", (f"{_EXP}/sent_probe_cycle_navigation/s0", "probe", 0),
     f"{_CYC} --preset probe --seed 0"),
    ("cycle navigation: untrained base, 4-shot", (f"{_EXP}/sent_fewshot_cycle_navigation/s0", "fewshot", 0),
     f"{_CYC} --preset fewshot --seed 0"),
    *[
        ("a5: PD-SSM, one readout of all heads", (f"{_EXP}/sent_bank_a5/s{s}", "ssm_classifier", s), f"{_A5} --seed {s}")
        for s in range(5)
    ],
    # the same row's seed 0 re-timed after the scan over sentence ends alone (RESULTS.md cites it as the row's command)
    ("a5: PD-SSM, one readout of all heads", (f"{_EXP}/fastscan_a5/s0", "ssm_classifier", 0), f"{_A5} --seed 0"),
    ("a5: diag_lru adapter", (f"{_EXP}/sent_diag_lru_a5/s0", "ssm_classifier", 0), f"{_A5} --preset diag_lru --seed 0"),
    ("a5: LoRA", (f"{_EXP}/sent_lora_classifier_a5/s0", "lora_classifier", 0), f"{_A5} --preset lora --seed 0"),
    ("a5: linear probe", (f"{_EXP}/sent_probe_a5/s0", "probe", 0), f"{_A5} --preset probe --seed 0"),
    # the 4-shot base on A5 is two runs (RESULTS.md: "two runs: 1-10 and 40, then 80 alone")
    ("a5: untrained base, 4-shot", (f"{_EXP}/sent_fewshot_a5/s0", "fewshot", 0),
     f"{_A5} --preset fewshot --seed 0 --test_buckets 1-10,40-40"),
    ("a5: untrained base, 4-shot", (f"{_EXP}/sent_fewshot_a5_at80/s0", "fewshot", 0),
     f"{_A5} --preset fewshot --seed 0 --test_buckets 80-80"),
    # RESULTS.md §2, BIG-Bench Hard's format (seed 0 ran with the preset's values as flags, under --preset none)
    *[
        ("tracking_shuffled_objects: PD-SSM, one readout of all heads",
         (f"runs/adapter/bbh_one_readout/s{s}", "ssm_classifier", s), f"{_BBH} --preset one_readout --seed {s}")
        for s in range(3)
    ],
    ("tracking_shuffled_objects: LoRA", ("runs/adapter/bbh_lora/s0", "lora_classifier", 0),
     f"{_BBH} --preset lora --seed 0"),
    ("tracking_shuffled_objects: entity-tracking adapter", ("runs/adapter/entity/s0", "ssm_classifier", 0),
     f"{_BBH} --preset entity --seed 0"),
    ("tracking_shuffled_objects: entity tracker through the LM head", ("runs/adapter/entity_lm_head/s0", "ssm", 0),
     f"{_BBH} --preset entity_lm_head --seed 0"),
]  # fmt: skip
# RESULTS.md §2's SmolLM2 tables: 7 parity rows, 9 cycle navigation rows, 5 A5 rows; 2 rows of BIG-Bench Hard's format
# and the entity-tracking adapter's paragraph below them (its classifier and its LM-head readout)
TABLE_ROWS = 25
# Presets defined before their first published run (docs/adapter.md says so): no row reports them yet. Once a run of
# one is published, its row moves into PUBLISHED and the preset out of this set (the test below insists).
AWAITING_RUNS: set[tuple[str, str]] = set()
# Commands docs/adapter.md gives for other recorded runs, checked the same way.
DOCUMENTED = [
    *[
        ("docs/adapter.md: one shared choice per sentence", (f"{_EXP}/sent_shared_cyc/s{s}", "ssm_classifier", s),
         f"{_CYC} --preset one_readout --seed {s} --extra_config pd_ssm_shared_selection=true")
        for s in (0, 1)
    ],
]  # fmt: skip

# Arguments of the script that are not settings, left out of the comparison:
# - output_dir: where the run was written (each published run has its own folder);
# - summary: the summary file the records were merged into;
# - seeds: seed-list bookkeeping (the product commands name the one seed of the record with --seed, which is compared);
# - resume: some published runs were continued from their checkpoints after an interruption (--resume), which ends
#   where the uninterrupted run ends (test_adapter.py::test_a_resumed_adapter_method_ends_as_the_uninterrupted_run).
NOT_COMPARED = {"output_dir", "summary", "seeds", "resume"}


def _records() -> list[dict]:
    return json.loads(SUMMARY.read_text())


def _resolved(argv: list[str]):
    """(settings, the other arguments) of scripts/train_adapter.py parsing `argv`, as main() resolves them; the
    settings' extra_config as the mixer's fields in effect (over the adapter's own, CONFIG_DEFAULTS), so that a key
    given at its default compares equal to the key not given."""
    script = load_script("train_adapter")
    args = script.build_parser().parse_args(argv)
    settings = script.resolved_settings(args)
    settings.validate()
    settings = dataclasses.replace(settings, extra_config=settings.mixer_settings())
    fields = {f.name for f in dataclasses.fields(AdapterExperimentSettings)}
    others = {k: v for k, v in vars(args).items() if k not in fields and k not in NOT_COMPARED}
    return settings, others


@pytest.mark.parametrize(
    ("row", "selector", "command"), PUBLISHED + DOCUMENTED, ids=[f"{p[1][0]}:{p[1][1]}" for p in PUBLISHED + DOCUMENTED]
)
def test_every_published_row_is_one_product_command(row, selector, command):
    """The product command of a row (`--base smollm2-135m --task T [--preset P] --seed S`) resolves to the settings of
    the run whose record the row reports: the record's own command, parsed by the same parser, gives equal settings
    on every field (and equal other arguments apart from NOT_COMPARED)."""
    matches = [r for r in _records() if (r["run_dir"], r["method"], r["seed"]) == selector]
    assert len(matches) == 1, f"{row}: {len(matches)} records match {selector}"
    record = matches[0]
    recorded = shlex.split(record["command"])
    assert " ".join(recorded[:2]) == SCRIPT
    # the records' commands were written under the options of their day: read in today's (legacy_settings.py)
    recorded = [*recorded[:2], *upgrade_argv("AdapterExperimentSettings", recorded[2:])]
    # Most published runs predate presets: they ran on the plain defaults under their flags, which `--preset none`
    # gives (repeated flags such as `--task parity ... --task a5`: argparse's last value wins, as in the run). A run
    # that named its preset resolves as it ran.
    named = "--preset" in recorded
    old, old_others = _resolved(recorded[2:] if named else [*recorded[2:], "--preset", NO_PRESET])
    new, new_others = _resolved(shlex.split(command))
    if "," in old.methods:
        # sent_base_par ran fewshot, probe and lora_classifier in one folder; each method trains on a fresh copy of
        # the base with torch seeded by the run's seed (adapter.experiment.train_method), so each record is the
        # method's run alone: its settings are the run's with `methods` that one method.
        assert record["method"] in old.method_list()
        old = dataclasses.replace(old, methods=record["method"])
    assert new.preset != NO_PRESET and record["method"] in new.method_list()
    # `preset` names where the values came from (the published runs gave every value as a flag).
    differing = {
        name: (getattr(old, name), getattr(new, name))
        for name in (f.name for f in dataclasses.fields(AdapterExperimentSettings))
        if name != "preset" and getattr(old, name) != getattr(new, name)
    }
    assert not differing, f"{row}: {SCRIPT} {command} differs from the published run: {differing}"
    assert old_others == new_others


def test_the_published_commands_cover_every_row_and_every_preset():
    """The list above names each of the table's rows and every SmolLM2 preset is one of them (no preset is
    untested against a published run), each row with one preset; the presets awaiting their first run have no
    published record (a published one must be checked against its row)."""
    rows = {row for row, _, _ in PUBLISHED}
    assert len(rows) == TABLE_ROWS, sorted(rows)
    used = {}
    for row, _, command in PUBLISHED:
        settings, _ = _resolved(shlex.split(command))
        used.setdefault(row, set()).add((settings.task, settings.preset))
    assert all(len(presets) == 1 for presets in used.values()), used
    covered = {pair for presets in used.values() for pair in presets}
    defined = {(task, name) for task, names in PRESETS[SMOLLM2].items() for name in names}
    assert AWAITING_RUNS <= defined and not covered & AWAITING_RUNS
    assert covered == defined - AWAITING_RUNS, covered ^ (defined - AWAITING_RUNS)
    published = {(r["task"], r.get("preset")) for r in _records()}
    assert not published & AWAITING_RUNS, published & AWAITING_RUNS


@pytest.mark.parametrize("task", ["parity", "cycle_navigation", "a5", "tracking_shuffled_objects"])
def test_a_smollm2_run_takes_the_tasks_best_preset_unless_told(task):
    """Without --preset a SmolLM2 run takes the task's default preset (parity: per-head classifier, cycle navigation:
    per-head with the preamble, A5: one readout, shuffled objects: the entity tracker), recorded as `preset`;
    `--preset none` gives the plain defaults."""
    settings, _ = _resolved(["--base_model", SMOLLM2, "--task", task])
    expected = {
        "parity": "per_head",
        "cycle_navigation": "per_head_preamble",
        "a5": "one_readout",
        "tracking_shuffled_objects": "entity",
    }[task]
    assert settings.preset == DEFAULT_PRESETS[SMOLLM2][task] == expected
    values = PRESETS[SMOLLM2][task][expected]
    assert all(getattr(settings, name) == value for name, value in values.items() if name != "extra_config")
    assert settings.extra_config.items() >= values.get("extra_config", {}).items()
    assert settings.classifier_per_head == (task in ("parity", "cycle_navigation"))
    assert settings.train_max_preamble_sentences == (30 if task == "cycle_navigation" else 0)
    plain, _ = _resolved(["--base_model", SMOLLM2, "--task", task, "--preset", "none"])
    plain_settings = AdapterExperimentSettings(base_model=SMOLLM2, task=task)
    assert plain == dataclasses.replace(plain_settings, extra_config=plain_settings.mixer_settings())


def test_the_tiny_base_keeps_its_defaults():
    """The script's no-argument run (the built-in tiny base) resolves to the settings' own defaults, preset `none`;
    so does a SmolLM2 task without a validated preset (s5)."""
    script = load_script("train_adapter")
    settings = script.resolved_settings(script.build_parser().parse_args([]))
    assert settings == AdapterExperimentSettings() and settings.preset == NO_PRESET
    assert _resolved([])[1] == {"model_card_dir": ""}
    s5 = script.resolved_settings(script.build_parser().parse_args(["--base_model", SMOLLM2, "--task", "s5"]))
    assert s5 == AdapterExperimentSettings(base_model=SMOLLM2, task="s5")


def test_flags_given_win_over_the_preset():
    """Precedence: defaults < preset < flags given. A flag equal to the default still wins over the preset."""
    settings, _ = _resolved(
        [*shlex.split(_CYC), "--preset", "lm_head_vote", "--learning_rate", "5e-3", "--classifier_per_head", "false"]
    )
    assert (settings.learning_rate, settings.classifier_per_head) == (5e-3, False)
    assert settings.write_learning_rate == 0.1 and settings.train_max_preamble_sentences == 30  # the preset's
    assert settings.fewshot_examples == AdapterExperimentSettings().fewshot_examples  # no preset sets it: the default
    default_lr, _ = _resolved(
        [*shlex.split(_PARITY), "--learning_rate", "0.01", "--extra_config", "pd_ssm_num_heads=2"]
    )
    assert (default_lr.learning_rate, default_lr.extra_config["pd_ssm_num_heads"], default_lr.preset) == (
        0.01, 2, "per_head",
    )  # fmt: skip
    assert default_lr.extra_config["pd_ssm_transition"] == "bank"  # --extra_config merges over the preset's keys


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*shlex.split(_PARITY), "--preset", "best"], "`preset` 'best' is unknown; with base 'smollm2-135m' and task"),
        ([*shlex.split(_PARITY), "--preset", "lm_head_vote"], "it is not a preset of task 'parity' on this base"),
        (["--preset", "per_head"], "(presets exist for base(s) ['smollm2-135m'] only); choose from ['none']"),
        ([*shlex.split(BASE), "--task", "s5", "--preset", "one_readout"], "choose from ['none']"),
    ],
)
def test_a_bad_preset_is_refused_naming_the_accepted_ones(argv, message, capsys):
    """An unknown preset, or one the base and task do not have, is a ValueError naming the accepted values; the
    script turns it into a usage error (exit status 2) with that message."""
    script = load_script("train_adapter")
    with pytest.raises(ValueError, match="choose from") as err:
        script.resolved_settings(script.build_parser().parse_args(argv))
    assert message in str(err.value)
    with pytest.raises(SystemExit) as exit_info:
        script.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    base = argv[argv.index("--base_model") + 1] if "--base_model" in argv else "tiny"
    task = argv[argv.index("--task") + 1] if "--task" in argv else "parity"
    assert str(accepted_presets(base, task)) in str(err.value)


def test_presets_are_valid_settings_of_their_task():
    """Every preset names only settings fields, and its settings validate for its base and task (so a preset cannot
    break at the start of an hour-long run); the named base is a real one; a task's default preset is one of its
    presets, and every task with presets has a default."""
    fields = {f.name for f in dataclasses.fields(AdapterExperimentSettings)}
    assert set(PRESETS) <= set(NAMED_BASES)
    for base, tasks in PRESETS.items():
        assert set(DEFAULT_PRESETS[base]) <= set(tasks)
        assert set(tasks) == set(DEFAULT_PRESETS[base])
        for task, names in tasks.items():
            assert DEFAULT_PRESETS[base].get(task, NO_PRESET) in [NO_PRESET, *names]
            for name, values in names.items():
                assert set(values) <= fields - {"task", "base_model", "preset", "seed"}, (task, name)
                AdapterExperimentSettings(base_model=base, task=task, preset=name, **values).validate()
    with pytest.raises(ValueError, match="`preset` 'lm_head' is unknown|not a preset"):
        AdapterExperimentSettings(base_model=SMOLLM2, task="a5", preset="lm_head").validate()


@pytest.mark.parametrize("name", sorted(PRESETS[SMOLLM2]["cycle_navigation"]))
def test_the_model_cards_command_gives_the_settings_back(name):
    """The model card's "Reproduce with" flags name the preset (unless it is the task's default) and only the values
    that differ from it; parsed, they give the run's settings back."""
    script = load_script("train_adapter")

    def resolved(flags: str) -> AdapterExperimentSettings:  # as the script resolves them (extra_config as given)
        return script.resolved_settings(script.build_parser().parse_args(shlex.split(flags)))

    settings = resolved(f"{_CYC} --preset {name} --seed 3 --eval_every 50")
    flags = reproduce_flags(settings)
    assert ("--preset" in flags) == (name != DEFAULT_PRESETS[SMOLLM2]["cycle_navigation"])
    assert "--eval_every 50" in flags and "--seed 3" in flags and "--extra_config" not in flags
    assert resolved(flags) == settings
    plain = AdapterExperimentSettings(base_model=SMOLLM2, extra_config={"pd_ssm_num_heads": 4})
    assert "--preset none" in reproduce_flags(plain) and "--extra_config pd_ssm_num_heads=4" in reproduce_flags(plain)
    assert resolved(reproduce_flags(plain)) == plain
    assert preset_values(SMOLLM2, "a5", "none") == {}


def test_help_lists_every_option_under_a_title(capsys):
    """--help runs and shows the options under their titles, in order; no option is left in "other options" but
    --help itself (a new option must be given a group)."""
    script = load_script("train_adapter")
    parser = script.build_parser()
    titles = [group.title for group in parser._action_groups if group._group_actions]
    assert titles == [*script.OPTION_GROUPS, "other options"]
    (other,) = [group for group in parser._action_groups if group.title == "other options"]
    assert [action.dest for action in other._group_actions if action.help is not argparse.SUPPRESS] == ["help"]
    grouped = {action for group in parser._action_groups if group is not other for action in group._group_actions}
    shown = [action for action in parser._actions if action.help is not argparse.SUPPRESS]  # old spellings: hidden
    assert all(action in grouped for action in shown if action.dest != "help")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0
    positions = [text.index(f"\n{title}:\n") for title in [*script.OPTION_GROUPS, "other options"]]
    assert positions == sorted(positions)
    assert "--base_model smollm2-135m --task cycle_navigation: per_head_preamble, per_head" in text


def test_seeds_train_one_run_per_seed_and_record_the_preset(tmp_path):
    """--seeds 0-1 on the tiny base: one run folder per seed (<output_dir>/s<seed>), each settings.json with its
    seed and preset, one summary record per seed and method carrying `preset`; --seed with --seeds is refused."""
    run, summary = tmp_path / "run", tmp_path / "summary.json"
    argv = ["--output_dir", str(run), "--methods", "ssm_classifier", *TINY_QUICK_RUN, "--tiny_layers", "1"]
    result = run_script("train_adapter", *argv, "--max_steps", "2", "--seeds", "0-1", "--summary", str(summary),
                        timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for seed in (0, 1):
        settings = json.loads((run / f"s{seed}" / "settings.json").read_text())
        assert (settings["seed"], settings["preset"], settings["max_steps"]) == (seed, NO_PRESET, 2)
    records = json.loads(summary.read_text())
    assert [(r["seed"], r["preset"], r["run_dir"]) for r in records] == [
        (0, NO_PRESET, str(run / "s0")), (1, NO_PRESET, str(run / "s1")),
    ]  # fmt: skip
    assert all("--seeds 0-1" in r["command"] for r in records)
    assert "parity, seed 1: answer accuracy" in result.stdout
    bad = run_script("train_adapter", *argv, "--seed", "0", "--seeds", "0-1")
    assert bad.returncode == 2 and "give --seed (one run) or --seeds (several), not both" in bad.stderr


def test_validation_frequency_does_not_change_the_trained_adapter(tmp_path):
    """The LM-head row's seed 0 validated every 100 steps, its preset validates once at the end (`eval_every` 800): a
    validation only scores the model on its own seeded stories, so with no early stop possible (min_steps =
    max_steps) the trained adapter is the same. Checked on the tiny base with the LM-head preset's kind of adapter
    (read after layer 0, write after the last, sentence ends, bank, z-scored input, whole-vocabulary loss):
    validating at every step or only after the last gives bit-identical weights and test accuracies."""
    from safetensors.torch import load_file

    argv = [
        "--methods", "ssm", *TINY_QUICK_RUN, "pd_ssm_transition=bank", "--tiny_layers", "2", "--test_buckets", "1-3",
        "--layer_index", "0", "--write_layer_index", "-1", "--transitions_at", "sentence_ends",
        "--standardize_input", "true", "--train_examples", "6", "--answer_loss", "vocab", "--min_steps", "3",
    ]  # fmt: skip
    runs = {every: tmp_path / f"every{every}" for every in (1, 3)}
    for every, run in runs.items():
        result = run_script("train_adapter", "--output_dir", str(run), *argv, "--eval_every", str(every), timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
    weights = [load_file(str(run / "ssm" / "adapter" / "adapter_model.safetensors")) for run in runs.values()]
    assert weights[0].keys() == weights[1].keys()
    assert all(weights[0][name].equal(weights[1][name]) for name in weights[0])
    results = [json.loads((run / "ssm" / "results.json").read_text()) for run in runs.values()]
    assert [len(r["history"]) for r in results] == [3, 1]  # validated 3 times, then once
    assert results[0]["test"] == results[1]["test"] and results[0]["steps"] == results[1]["steps"] == 3
