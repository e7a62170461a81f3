"""The reader of BIG-Bench Hard's task files (hf_ssm/data/nl_bbh.py), on small files of the tests' own in the
published format (the benchmark's files are for evaluation only and stay out of the repository)."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from hf_ssm.data import shuffled_objects as so
from hf_ssm.data.nl_bbh import adapter_prompt, parse_bbh, read_bbh_file


def own_file(tmp_path, count: int = 4, objects: int = 3, **changes) -> tuple:
    """A task file of `count` generated stories in the benchmark's format (its line break after the introduction),
    with `changes` applied to the decoded JSON (a function of it); (path, data, stories)."""
    rng = random.Random(7)
    stories = [so.shuffled_objects_story(objects, objects, rng, "books", layout="newline") for _ in range(count)]
    data = {
        "canary": "a canary of the tests",
        "examples": [{"input": s.benchmark_input, "target": s.choice} for s in stories],
    }
    for change in changes.values():
        change(data)
    path = tmp_path / "task.json"
    path.write_text(json.dumps(data))
    return path, data, stories


def test_reads_a_file_in_the_published_format(tmp_path):
    """Every item keeps its input and target as written, its options in order (A), (B), ... and the target's index;
    the file's sha256 is that of its bytes; the adapter's prompt is the input and a line "Answer:"."""
    path, data, stories = own_file(tmp_path, count=4, objects=5)
    bbh = read_bbh_file(path)
    assert bbh.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and bbh.canary == data["canary"]
    assert [i.index for i in bbh.items] == [0, 1, 2, 3] and bbh.option_counts == [5]
    for item, story in zip(bbh.items, stories):
        assert (item.input, item.target) == (story.benchmark_input, story.choice)
        assert item.options[item.answer] == story.free_answer and item.letters == "ABCDE"
        assert adapter_prompt(item) == story.prompt


def _set(index, key, value):
    return lambda data: data["examples"][index].__setitem__(key, value)


def _replace(index, old, new):
    return lambda data: data["examples"][index].__setitem__("input", data["examples"][index]["input"].replace(old, new))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.__setitem__("extra", 1), "top level must be an object with exactly 'canary' and 'examples'"),
        (lambda d: d.pop("canary"), "top level must be an object with exactly 'canary' and 'examples'"),
        (lambda d: d.__setitem__("examples", []), "'examples' must be a non-empty list"),
        (lambda d: d["examples"][1].pop("target"), r"examples\[1\] must be an object with exactly the keys"),
        (_set(2, "target", "B"), r"examples\[2\].target must look like '\(A\)'"),
        (_set(0, "input", ""), r"examples\[0\].input must be a non-empty string"),
        (_set(3, "target", "(D)"), r"examples\[3\].target '\(D\)' is not one of its options \(A\)..\(C\)"),
        (_replace(1, "\n(B) ", "\n(C) "), r"examples\[1\].input: option line 2 must read '\(B\) <text>'"),
        (_replace(2, "\nOptions:\n", "\n"), r"examples\[2\].input must contain the line 'Options:' once"),
        (_replace(0, "(C) ", "C) "), r"examples\[0\].input: option line 3 must read '\(C\) <text>'"),
    ],
    ids=[
        "extra key",
        "no canary",
        "no examples",
        "no target",
        "bare letter",
        "empty input",
        "target not an option",
        "letters out of order",
        "no options line",
        "unbracketed letter",
    ],  # fmt: skip
)
def test_a_malformed_file_is_refused_naming_what_is_wrong(tmp_path, change, message):
    """A file whose structure is not the published one is refused with a ValueError naming the file, the item and
    the broken rule."""
    path, _, _ = own_file(tmp_path, change=change)
    with pytest.raises(ValueError, match=message) as err:
        read_bbh_file(path)
    assert str(path) in str(err.value)


def test_a_file_that_is_not_json_or_not_there_is_refused(tmp_path):
    """A missing file and one that is not JSON are refused, naming the path."""
    with pytest.raises(ValueError, match="no BIG-Bench Hard file at"):
        read_bbh_file(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"canary": "x", "examples": [')
    with pytest.raises(ValueError, match=f"{broken}: not a JSON file"):
        read_bbh_file(broken)
    with pytest.raises(ValueError, match="top level must be an object"):
        parse_bbh([1, 2])
