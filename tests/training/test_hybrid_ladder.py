"""scripts/hybrid_ladder.py: each rung is the rung before it plus exactly its own difference, every rung's command is
one the driver accepts and trains the settings the rung names, and the table reports every seed."""

from __future__ import annotations

import json

from hf_ssm.training.state_tracking.settings import StateTrackingSettings
from model_checks import load_script

ladder = load_script("hybrid_ladder")
driver = load_script("train_state_tracking")


def _settings(rung: str, seed: int = 0) -> StateTrackingSettings:
    parser = driver.build_parser()
    _, runs = driver.plan_runs(parser, parser.parse_args(ladder.rung_arguments(rung, "a5", seed)))
    ((settings, _),) = runs
    return settings


def test_each_rung_adds_its_own_difference_to_the_one_before():
    """Rung by rung, the trained settings differ from the previous rung's exactly in what the rung names."""
    expected = {
        "trained_embedding": {"freeze_embedding": False},
        "mixer_mlp": {"block_type": "mixer_mlp", "pd_ssm_transition_init_scale": 1.0},
        "residual": {"block_type": "pre_norm_residual"},
        "trained_c": {"pd_ssm_output_trainable": True},
        "with_attention": {"pattern": "SA"},
        "after_attention": {"pattern": "AS"},
        "four_layers": {"pattern": "SASA"},
    }

    def flat(settings) -> dict:
        fields = {k: v for k, v in vars(settings).items() if k != "extra_config"}
        return fields | dict(settings.extra_config)

    first = flat(_settings("table"))
    assert first["block_type"] == "mixer_only" and first["freeze_embedding"] and first["restarts"] == 1
    previous = first
    for name in ladder.RUNG_NAMES[1:]:
        current = flat(_settings(name))
        changed = {k: current[k] for k in current if current[k] != previous.get(k)}
        assert changed == expected[name], name
        previous = current


def test_the_table_lists_every_seed_and_counts_the_runs_that_learnt():
    """The Markdown row of a rung gives each seed's test mean (and far accuracy), the count at >= 99 % and mean ± std."""
    run = {"far": {"1000": 1.0, "4000": 0.998}, "cpu_seconds": 300.0}
    record = {
        "table": {"0": {**run, "test_mean": 1.0}, "1": {**run, "test_mean": 0.995}, "2": {**run, "test_mean": 0.35}},
    }
    (row,) = ladder.table(record)[2:]
    assert "s0 100.0 (100.0/99.8); s1 99.5 (100.0/99.8); s2 35.0 (100.0/99.8)" in row
    assert "| 2/3 |" in row and "78.2 ± 37.4" in row


def test_a_variant_changes_every_rung_by_its_own_flags_only():
    """`--variants heads32` adds exactly its own setting to each rung (and the width it implies: C is square, d = 2 H N),
    and its runs are recorded under their own key."""
    for name in ladder.RUNG_NAMES:
        plain = vars(_settings(name))
        parser = driver.build_parser()
        _, runs = driver.plan_runs(parser, parser.parse_args(ladder.rung_arguments(name, "a5", 0, ("heads32",))))
        ((varied, _),) = runs
        changed = {k for k, v in vars(varied).items() if v != plain[k]}
        assert changed == {"num_heads", "hidden_size"} and (varied.num_heads, varied.hidden_size) == (32, 512), name
    assert ladder.record_key("mixer_mlp", ("heads32",)) == "mixer_mlp+heads32"


def test_wp_step_divides_the_transition_learning_rate_by_the_root_of_the_width():
    """`wp_step` sets pd_ssm_transition_lr_scale = 1/sqrt(d) for the width the rung trains (d = 256, or 512 with
    heads32), whichever order the variants come in."""
    parser = driver.build_parser()
    for variants, width in ((("wp_step",), 256), (("heads32", "wp_step"), 512), (("wp_step", "heads32"), 512)):
        _, runs = driver.plan_runs(parser, parser.parse_args(ladder.rung_arguments("mixer_mlp", "a5", 0, variants)))
        ((settings, _),) = runs
        assert settings.hidden_size == width
        assert abs(settings.extra_config["pd_ssm_transition_lr_scale"] - width**-0.5) < 1e-4, variants
    # with the rest at 1e-3, W_P's own rate stays table's 1e-2 / sqrt(d)
    args = ladder.rung_arguments("after_attention", "a5", 0, ("heads32", "wp_step", "slow_rest"))
    _, runs = driver.plan_runs(parser, parser.parse_args(args))
    ((settings, _),) = runs
    assert settings.learning_rate == 1e-3
    scale = settings.extra_config["pd_ssm_transition_lr_scale"]
    assert abs(settings.learning_rate * scale - 1e-2 * 512**-0.5) < 1e-6


def test_normal_embedding_starts_the_embedding_at_the_models_own_init():
    parser = driver.build_parser()
    args = ladder.rung_arguments("residual", "a5", 0, ("heads32", "wp_step", "normal_embedding"))
    _, runs = driver.plan_runs(parser, parser.parse_args(args))
    ((settings, _),) = runs
    assert settings.embedding_init == "normal" and not settings.freeze_embedding


def test_c_frozen_undoes_trained_c_on_the_rungs_above_it():
    parser = driver.build_parser()
    for rung in ("trained_c", "four_layers"):
        args = ladder.rung_arguments(rung, "a5", 0, ("heads32", "wp_step", "c_frozen"))
        _, runs = driver.plan_runs(parser, parser.parse_args(args))
        ((settings, _),) = runs
        assert settings.extra_config["pd_ssm_output_trainable"] is False, rung


def test_the_table_puts_a_variant_row_after_the_plain_rungs_and_names_its_change():
    run = {"far": {}, "cpu_seconds": 10.0, "test_mean": 1.0}
    record = {"table+heads32": {"0": run}, "mixer_mlp": {"0": run}, "table": {"0": run}}
    rows = ladder.table(record)[2:]
    assert [r.split(" | ")[0] for r in rows] == ["| table", "| mixer_mlp", "| table+heads32"]
    assert "32 heads" in rows[2]


def _a5_heads(tmp_path, tracked: dict[int, int]) -> None:
    """Save a hand-set table layer of 4 heads of N = 8 where head h in `tracked` moves its state as A5 moves point
    tracked[h] (its state, from e_0, is the image of that point, relabelled so that the point is 0) and the other
    heads stay put."""
    import torch

    from hf_ssm import HybridSSMConfig, HybridSSMForTokenClassification

    config = HybridSSMConfig(
        vocab_size=3, hidden_size=64, num_hidden_layers=1, mixers="S", block_type="mixer_only", num_labels=60,
        pd_ssm_transition="direct", pd_ssm_num_heads=4, pd_ssm_head_state_size=8, pd_ssm_diagonal="unit",
        pd_ssm_input="none", pd_ssm_initial_state="one_hot", pd_ssm_transition_norm=False,
    )  # fmt: skip
    model = HybridSSMForTokenClassification(config)
    generators = {1: (1, 2, 3, 4, 0), 2: (1, 0, 3, 2, 4)}  # the task's (0 1 2 3 4) and (0 1)(2 3)
    logits = torch.zeros(3, 4, 8, 8)  # (token, head, row, column): column j's largest row is where state j goes
    for token in range(3):
        for head in range(4):
            for j in range(8):
                if head in tracked and token in generators and j < 5:
                    # state j stands for point (j + p) mod 5, p = tracked[head]: g moves it to the state of g's image
                    p = tracked[head]
                    logits[token, head, (generators[token][(j + p) % 5] - p) % 5, j] = 1.0
                else:
                    logits[token, head, j, j] = 1.0
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(3, 64))
        proj = model.model.layers[0].mixer.transition_proj.weight  # (H N N, d)
        proj.zero_()
        proj[:, :3] = logits.permute(1, 2, 3, 0).reshape(-1, 3)
    model.save_pretrained(tmp_path)


def test_head_information_finds_the_head_that_runs_a5_on_five_points(tmp_path):
    """Head 0 tracks point 0's image under A5 and the others stay put: head 0 carries log2 5 bits about the class,
    the others none."""
    _a5_heads(tmp_path, {0: 0})
    bits = ladder.head_information(tmp_path, "a5", words=256)
    assert abs(bits[0] - 2.32) < 0.05 and max(bits[1:]) < 0.05, bits


def test_joint_accuracy_tells_heads_that_name_the_element_from_heads_that_overlap(tmp_path):
    """Three heads tracking the images of points 0, 1, 2 name every element of A5 together (a permutation of A5 that
    fixes three of five points is the identity); three heads that all track point 0 carry log2 5 bits each, as
    many as the others, and together name no more than one does (about a twelfth of the words)."""
    _a5_heads(tmp_path / "apart", {0: 0, 1: 1, 2: 2})
    _a5_heads(tmp_path / "same", {0: 0, 1: 0, 2: 0})
    for folder in ("apart", "same"):
        bits = ladder.head_information(tmp_path / folder, "a5", words=256)
        assert all(abs(b - 2.32) < 0.05 for b in bits[:3]) and bits[3] < 0.05, (folder, bits)
    assert ladder.joint_accuracy(tmp_path / "apart", "a5", [0, 1, 2], words=256) == 1.0
    assert ladder.joint_accuracy(tmp_path / "same", "a5", [0, 1, 2], words=256) < 0.15


def test_a_run_recorded_by_another_ladder_process_meanwhile_is_kept(tmp_path, monkeypatch):
    """Two ladder processes share one record: each run is merged into the file as it is on disk when the run ends, so
    a run the other process recorded after this one started is not overwritten."""
    record = tmp_path / "ladder.json"
    record.write_text(json.dumps({"a5": {"table": {"0": {"test_mean": 1.0, "far": {}, "cpu_seconds": 1.0}}}}))
    other = {"test_mean": 0.5, "far": {}, "cpu_seconds": 1.0}

    def run_rung(name, task, seed, *args):
        # meanwhile, another process records its own run
        full = json.loads(record.read_text())
        full["a5"]["table+heads32"] = {"0": other}
        record.write_text(json.dumps(full))
        return {"test_mean": 0.25, "far": {}, "cpu_seconds": 2.0}

    monkeypatch.setattr(ladder, "run_rung", run_rung)
    ladder.main(["--rungs", "mixer_mlp", "--seeds", "0", "--record", str(record), "--runs_dir", str(tmp_path)])
    runs = json.loads(record.read_text())["a5"]
    assert runs["table"]["0"]["test_mean"] == 1.0 and runs["table+heads32"]["0"] == other
    assert runs["mixer_mlp"]["0"]["test_mean"] == 0.25


def _recall_settings(rung: str, variants: tuple[str, ...] = ()) -> StateTrackingSettings:
    parser = driver.build_parser()
    args = ladder.rung_arguments(rung, "mqar", 0, variants, "recall")
    _, runs = driver.plan_runs(parser, parser.parse_args(args))
    ((settings, _),) = runs
    return settings


def test_the_recall_ladder_climbs_from_the_binder_to_the_block_one_difference_at_a_time():
    """The recall ladder starts at hybrid_recall's SAA at 1e-3 on the small recall (§8.7's binder) and each rung
    adds exactly its own difference; the last is hybrid_block_wide's layer, W_P at 1e-2 / sqrt(512) as there."""
    expected = {
        "sublayer_delay": {"attention_frozen_steps": 200, "mlp_frozen_steps": 200},
        "trained_embedding": {"freeze_embedding": False},
        "block": {"num_heads": 64, "hidden_size": 512, "pd_ssm_output_init": "normal",
                  "pd_ssm_transition_lr_scale": 0.4419},
    }  # fmt: skip

    def flat(settings) -> dict:
        return {k: v for k, v in vars(settings).items() if k != "extra_config"} | dict(settings.extra_config)

    first = flat(_recall_settings("binder"))
    assert (first["task"], first["recipe"], first["pattern"], first["learning_rate"]) == ("mqar", "hybrid_recall",
                                                                                          "SAA", 1e-3)  # fmt: skip
    assert (first["task_vocab_size"], first["sequence_length"], first["train_min_length"]) == (34, 64, 2)
    assert first["freeze_embedding"] and first["num_heads"] == 16 and first["hidden_size"] == 256
    previous = first
    for name in ladder.LADDERS["recall"].rung_names[1:]:
        current = flat(_recall_settings(name))
        changed = {k: current[k] for k in current if current[k] != previous.get(k)}
        assert changed == expected[name], name
        previous = current
    block = _recall_settings("block")
    transition_rate = block.learning_rate * block.extra_config["pd_ssm_transition_lr_scale"]
    assert abs(transition_rate - 1e-2 * 512**-0.5) < 1e-6


def test_a_recall_variant_applies_one_rungs_difference_alone():
    """`--variants trained_embedding` on the binder trains its embedding without the sublayer delay below it on the
    ladder, and normal_embedding on top starts it at the model's own init."""
    varied = _recall_settings("binder", ("trained_embedding", "normal_embedding"))
    assert not varied.freeze_embedding and varied.embedding_init == "normal"
    assert varied.attention_frozen_steps == 0 and varied.num_heads == 16


def test_the_output_scale_variant_sets_the_output_init_scale_and_nothing_else():
    """`--variants output_scale` (the fix of §8.8) on the block sets pd_ssm_output_init_scale = 0.1 and only that
    (what the field does to C: tests/models/test_mixer_mlp_block.py)."""
    plain, scaled = _recall_settings("block"), _recall_settings("block", ("output_scale",))
    assert scaled.extra_config.pop("pd_ssm_output_init_scale") == 0.1
    assert vars(scaled) == vars(plain)


def test_the_recall_ladder_refuses_another_task_and_names_its_own_rungs(tmp_path, capsys):
    import pytest

    common = ["--record", str(tmp_path / "l.json"), "--runs_dir", str(tmp_path)]
    with pytest.raises(SystemExit, match="recall ladder trains mqar only"):
        ladder.main(["--ladder", "recall", "--task", "a5", *common])
    with pytest.raises(SystemExit, match="the recall ladder's are binder, sublayer_delay"):
        ladder.main(["--ladder", "recall", "--rungs", "table", *common])
    with pytest.raises(SystemExit, match="the recall ladder's are trained_embedding"):
        ladder.main(["--ladder", "recall", "--variants", "heads32", *common])
    record = {"mqar": {"binder": {"0": {"test_mean": 1.0, "far": {}, "cpu_seconds": 5.0}}}}
    (tmp_path / "l.json").write_text(json.dumps(record))
    ladder.main(["--ladder", "recall", "--table", *common])
    assert "| binder | hybrid_recall's SAA at 1e-3" in capsys.readouterr().out
