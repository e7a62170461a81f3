"""Word-problem files in the "Illusion of State" paper's format (hf_ssm/data/word_problems.py): reading CSV and
JSONL, dense (prefix products) and final-product targets, the vocabulary, and the exact errors of malformed rows."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from hf_ssm.data import load_word_problem_file
from hf_ssm.data.word_problems import word_problem_task

S3 = sorted(itertools.permutations(range(3)))  # element index = position in this sorted list


def s3_rows(count: int, lengths, seed: int) -> list[tuple[list[int], list[int]]]:
    """Random S3 words and their prefix products (later elements act last: state = g_t o state), computed here."""
    rng, rows = random.Random(seed), []
    for _ in range(count):
        word = [rng.randrange(6) for _ in range(rng.choice(lengths))]
        state, prefix = tuple(range(3)), []
        for g in word:
            state = tuple(S3[g][state[i]] for i in range(3))
            prefix.append(S3.index(state))
        rows.append((word, prefix))
    return rows


def write_csv(path, rows, dense: bool = True) -> None:
    lines = ["length,input,target"]
    for word, prefix in rows:
        target = prefix if dense else prefix[-1:]
        lines.append(f"{len(word)},{' '.join(map(str, word))},{' '.join(map(str, target))}")
    path.write_text("\n".join(lines) + "\n")


def test_reads_dense_and_final_targets(tmp_path):
    """Prefix-product targets label every position, a single target only the last; token ids are index + 1 (0 is
    padding); the vocabulary covers both files (largest index + 1) or a larger num_classes."""
    rows = s3_rows(5, [3, 4], seed=0)
    write_csv(tmp_path / "dense.csv", rows)
    write_csv(tmp_path / "final.csv", rows, dense=False)
    dense, final = load_word_problem_file(tmp_path / "dense.csv"), load_word_problem_file(tmp_path / "final.csv")
    for i, (word, prefix) in enumerate(rows):
        assert dense[i]["input_ids"].tolist() == [g + 1 for g in word] and dense[i]["labels"].tolist() == prefix
        assert final[i]["labels"].tolist() == [-100] * (len(word) - 1) + prefix[-1:]
        assert dense[i]["label"] == final[i]["label"] == prefix[-1] and dense[i]["length"] == len(word)
    assert dense.dense and not final.dense and sorted(set(dense.lengths)) == [3, 4]
    task = word_problem_task(dense, final)
    assert task.num_classes == max(dense.max_index, final.max_index) + 1 and task.vocab_size == task.num_classes + 1
    assert not task.labels_every_prefix and word_problem_task(dense, dense, num_classes=120).num_classes == 120
    with pytest.raises(ValueError, match="num_classes must be an int above every element index"):
        word_problem_task(dense, final, num_classes=2)


def test_jsonl_with_strings_or_lists(tmp_path):
    """JSONL rows with the same fields, the indices as a string or a list, read like the CSV."""
    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps({"length": 3, "input": "1 2 0", "target": "1 0 0"}) + "\n"
        + json.dumps({"length": 2, "input": [4, 1], "target": [3]}) + "\n"
    )  # fmt: skip
    data = load_word_problem_file(path)
    assert data[0]["labels"].tolist() == [1, 0, 0] and data[1]["labels"].tolist() == [-100, 3]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("length,input\n2,1 2\n", "bad.csv: the header has no column `target` (a word-problem CSV needs the columns "
         "length,input,target; found length,input)"),
        ("length,input,target\n2,1 2,3 0\n2,1 x,1\n", "bad.csv: row 2, column `input`: token 'x' (position 1) is "
         "not an integer"),
        ("length,input,target\n3,1 2,3 0\n", "bad.csv: row 1, column `length`: 3, but column `input` has 2 tokens"),
        ("length,input,target\n3,1 2 0,3 0\n", "bad.csv: row 1, column `target`: 2 entries; need 1 (the final "
         "product) or 3 (the prefix products, one per input token)"),
        ("length,input,target\n2,1 -2,1\n", "bad.csv: row 1, column `input`: index -2 (position 1) is negative"),
        ("length,input,target\n2,1 2,-1\n", "bad.csv: row 1, column `target`: index -1 (position 0) is negative"),
        ("length,input,target\n2,1 2\n", "bad.csv: row 1, column `target`: missing"),
        ("length,input,target\ntwo,1 2,1\n", "bad.csv: row 1, column `length`: 'two' is not an integer"),
        ("length,input,target\n", "bad.csv: no data rows"),
    ],
)  # fmt: skip
def test_malformed_rows_are_refused_naming_file_row_and_column(tmp_path, body, message):
    """Every malformed file gives a ValueError with the file, the row (data rows from 1) and the column."""
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(ValueError) as err:
        load_word_problem_file(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_a_missing_jsonl_field_and_a_missing_file(tmp_path):
    """A JSONL row without `length`, and a path that is no file, are refused by name."""
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"input": "1", "target": "1"}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl: row 1, column `length`: missing"):
        load_word_problem_file(path)
    with pytest.raises(ValueError, match="does not exist"):
        load_word_problem_file(tmp_path / "none.csv")
