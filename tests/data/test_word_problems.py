"""Word-problem files in the "Illusion of State" paper's formats (hf_ssm/data/word_problems.py): reading CSV (the
README's `length,input,target` and the authors' generator's `seed,input,target`), JSONL and JSON arrays, dense
(prefix products) and final-product targets, the vocabulary, and the exact errors of malformed rows."""

from __future__ import annotations

import hashlib
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
         "input,target, `length` optional, e.g. length,input,target or seed,input,target; found length,input)"),
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
        # values past the header's columns (once silently dropped): refused naming the row and the line
        ("length,input,target\n2,1 2,3 0\n2,1 2,3 0,7\n", "bad.csv: row 2 (line 3): 4 values, but the header has 3 "
         "columns (length,input,target)"),
        ("seed,input,target\n5,1 2,3,0\n", "bad.csv: row 1 (line 2): 4 values, but the header has 3 columns"),
        ("length,input,target\n2.0,1 2,3\n", "bad.csv: row 1, column `length`: '2.0' is not an integer"),
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
    """A JSONL row without `target`, and a path that is no file, are refused by name."""
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"length": 1, "input": "1"}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl: row 1, column `target`: missing"):
        load_word_problem_file(path)
    with pytest.raises(ValueError, match="does not exist"):
        load_word_problem_file(tmp_path / "none.csv")


def write_generator_csv(path, rows, seed: int = 1234) -> None:
    """The layout jopetty/word-problem's src/generate_data.py writes (polars' write_csv of seed / input / target):
    no `length` column, the generator's seed on every row, the prefix products as the target."""
    lines = ["seed,input,target"]
    lines += [f"{seed},{' '.join(map(str, word))},{' '.join(map(str, prefix))}" for word, prefix in rows]
    path.write_text("\n".join(lines) + "\n")


def test_reads_the_authors_generator_layout(tmp_path):
    """`seed,input,target` with prefix products (the authors' generator): the length is the token count, every
    position is labelled with its prefix product, the final answer (`label`) is the last target token, and the
    `seed` column is ignored and named (ignored_fields), never refused."""
    rows = s3_rows(6, [2, 5, 7], seed=3)
    write_generator_csv(tmp_path / "S3=7.csv", rows)
    data = load_word_problem_file(tmp_path / "S3=7.csv")
    assert data.ignored_fields == ("seed",) and data.dense
    assert data.lengths == [len(word) for word, _ in rows]
    for i, (word, prefix) in enumerate(rows):
        assert data[i]["input_ids"].tolist() == [g + 1 for g in word]
        assert data[i]["labels"].tolist() == prefix and data[i]["label"] == prefix[-1]
    assert load_word_problem_file(tmp_path / "S3=7.csv").ignored_fields == ("seed",)
    write_csv(tmp_path / "plain.csv", rows)
    assert load_word_problem_file(tmp_path / "plain.csv").ignored_fields == ()


def test_a_byte_order_mark_is_read_and_the_fingerprint_is_of_the_bytes(tmp_path):
    """Excel's "CSV UTF-8" starts with a byte-order mark: the file reads exactly as without it (the BOM once made
    the first column `\\ufefflength`, refused with an invisible character). The fingerprint is the file's path, the
    size and sha256 of its bytes."""
    rows = s3_rows(4, [3, 4], seed=1)
    write_csv(tmp_path / "plain.csv", rows)
    body = (tmp_path / "plain.csv").read_bytes()
    (tmp_path / "excel.csv").write_bytes(b"\xef\xbb\xbf" + body)
    plain, excel = load_word_problem_file(tmp_path / "plain.csv"), load_word_problem_file(tmp_path / "excel.csv")
    assert (excel.inputs, excel.targets, excel.ignored_fields) == (plain.inputs, plain.targets, ())
    raw = b"\xef\xbb\xbf" + body
    assert excel.fingerprint == {
        "path": str((tmp_path / "excel.csv").resolve()),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "size": len(raw),
    }


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"length": 3.7, "input": "1 2 0", "target": "1"}, "bad.jsonl: row 1, column `length`: 3.7 is not an integer"),
        ({"length": True, "input": "1", "target": "1"}, "bad.jsonl: row 1, column `length`: True is not an integer"),
        ({"length": 3.0, "input": "1 2 0", "target": "1"}, "bad.jsonl: row 1, column `length`: 3.0 is not an integer"),
    ],
)
def test_a_jsonl_length_that_is_not_an_integer_is_refused(tmp_path, record, message):
    """A JSON `length` of 3.7 (once truncated to 3) or true (once taken as 1) is refused naming the file, the row
    and the field; so is 3.0 (a length is a count, as an index is)."""
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError) as err:
        load_word_problem_file(path)
    assert message in str(err.value)


def test_a_json_array_of_records_is_read(tmp_path):
    """A `.json` file holding one JSON array of records (once read as JSONL and refused) reads as the same rows
    would from JSONL, `length` optional, extra fields named as ignored; a malformed array is refused by name."""
    rows = [{"length": 3, "input": "1 2 0", "target": "1 0 0", "seed": 7}, {"input": [4, 1], "target": [3]}]
    (tmp_path / "rows.json").write_text(json.dumps(rows, indent=2))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    array, lines = load_word_problem_file(tmp_path / "rows.json"), load_word_problem_file(tmp_path / "rows.jsonl")
    assert (array.inputs, array.targets) == (lines.inputs, lines.targets) == ([[1, 2, 0], [4, 1]], [[1, 0, 0], [3]])
    assert array.ignored_fields == lines.ignored_fields == ("seed",)
    (tmp_path / "bad.json").write_text(json.dumps([{"input": "1", "target": "1"}, 5]))
    with pytest.raises(ValueError, match="bad.json: row 2: not a JSON object"):
        load_word_problem_file(tmp_path / "bad.json")
    (tmp_path / "cut.json").write_text('[{"input": "1", "target": "1"},')
    with pytest.raises(ValueError, match="cut.json: not valid JSON"):
        load_word_problem_file(tmp_path / "cut.json")


def test_the_vocabulary_covers_every_file_of_the_run(tmp_path):
    """word_problem_task takes any number of files (training, validation, test): the classes cover the largest
    index in any of them, and every position is labelled only when every file gives prefix products."""
    write_csv(tmp_path / "a.csv", [([0, 1], [0, 1])])
    write_csv(tmp_path / "b.csv", [([5, 1], [5, 2])], dense=False)
    a, b = load_word_problem_file(tmp_path / "a.csv"), load_word_problem_file(tmp_path / "b.csv")
    task = word_problem_task(a, a, b)
    assert (task.num_classes, task.labels_every_prefix) == (6, False)
    assert word_problem_task(a, a).labels_every_prefix
