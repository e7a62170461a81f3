"""scripts/analyze_bbh.py and hf_ssm.data.nl_bbh.shuffle_trace: a story in tracking_shuffled_objects' layout is replayed
swap by swap (every holder after every swap, the asked person), a wrong answer is told apart as a missed later swap
("earlier") or someone else's object ("other's"), and a record is scored by scenario and swap counts — on small files of
the tests' own in the benchmark's format; a record of another file (sha256) or an item off the layout is refused."""

from __future__ import annotations

import hashlib
import json

import pytest

from hf_ssm.data.nl_bbh import parse_bbh, shuffle_trace
from model_checks import load_script

analyze = load_script("analyze_bbh")

DANCE = (
    "Alice, Bob, and Claire are dancers at a square dance. At the start of a song, they each have a partner: "
    "Alice is dancing with Rodrigo, Bob is dancing with Karl, and Claire is dancing with Lola.\n"
    "Throughout the song, the dancers often trade partners. First, Alice and Bob switch partners. "
    "Then, Claire and Alice switch partners. Finally, Bob and Claire switch partners. "
    "At the end of the dance, Alice is dancing with\nOptions:\n(A) Rodrigo\n(B) Karl\n(C) Lola"
)
BALLS = (
    "Alice, Bob, and Claire are playing a game. At the start of the game, they are each holding a ball: "
    "Alice has a red ball, Bob has a blue ball, and Claire has a green ball.\n"
    "As the game progresses, pairs of players trade balls. First, Bob and Claire swap balls. "
    "Finally, Alice and Bob swap balls. At the end of the game, Claire has the\n"
    "Options:\n(A) red ball\n(B) blue ball\n(C) green ball"
)
EXAMPLES = [{"input": DANCE, "target": "(C)"}, {"input": BALLS, "target": "(B)"}]


def test_a_story_is_replayed_swap_by_swap():
    """Alice swaps with Bob (holds Karl), then with Claire (holds Lola); Bob and Claire's swap leaves her with Lola."""
    trace = shuffle_trace(parse_bbh({"canary": "", "examples": EXAMPLES})[0])
    assert trace.scenario == "dance partners" and trace.people == ("Alice", "Bob", "Claire")
    assert trace.swaps == ((0, 1), (2, 0), (1, 2)) and trace.asked == 0
    assert trace.holders == ((0, 1, 2), (1, 0, 2), (2, 0, 1), (2, 1, 0))
    assert (trace.asked_swaps, trace.steps_since_asked_swap) == (2, 1)
    assert [trace.error_kind(k) for k in (2, 1, 0)] == ["right", "earlier", "earlier"]
    balls = shuffle_trace(parse_bbh({"canary": "", "examples": EXAMPLES})[1])
    assert balls.scenario == "balls" and balls.holders[-1][balls.asked] == 1 and balls.steps_since_asked_swap == 1
    assert balls.error_kind(0) == "other's"  # Bob ends with the red ball; Claire never held it


def test_an_item_off_the_layout_is_refused_naming_it():
    odd = {"input": "Alice and Bob are here.\nOptions:\n(A) x\n(B) y", "target": "(A)"}
    with pytest.raises(ValueError, match="item 0: not in tracking_shuffled_objects' layout"):
        shuffle_trace(parse_bbh({"canary": "", "examples": [odd]})[0])


def _files(tmp_path, predicted: list[str]):
    data = tmp_path / "tiny_bbh.json"
    data.write_text(json.dumps({"canary": "the tests' own", "examples": EXAMPLES}))
    record = {
        "file": str(data), "sha256": hashlib.sha256(data.read_bytes()).hexdigest(), "label": "s0",
        "predictions": [{"index": i, "target": e["target"], "classifier": p} for i, (e, p) in enumerate(
            zip(EXAMPLES, predicted))],
    }  # fmt: skip
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    return data, path


def test_a_record_is_scored_by_scenario_and_kind_of_error(tmp_path, capsys):
    _, path = _files(tmp_path, ["B", "B"])  # the dance item wrong (Karl: held after the first swap), balls right
    out = tmp_path / "analysis.json"
    assert analyze.main(["--records", str(path), "--out", str(out)]) == 0
    (analysis,) = json.loads(out.read_text())["analyses"]
    assert analysis["accuracy"] == 0.5 and analysis["errors"] == {"earlier": 1}
    assert analysis["by"]["scenario"] == {"dance partners": [0, 1], "balls": [1, 1]}
    assert analysis["by"]["swaps after the asked person's last"] == {"1": [1, 2]}
    printed = capsys.readouterr().out
    assert "| scenario: balls | 100.0 (1) | 100.0 |" in printed and "| wrong: earlier | 1 | |" in printed


def test_a_record_of_a_changed_file_is_refused(tmp_path, capsys):
    data, path = _files(tmp_path, ["C", "B"])
    data.write_text(data.read_text() + " ")
    with pytest.raises(SystemExit):
        analyze.main(["--records", str(path)])
    assert "differs from the record's" in capsys.readouterr().err
