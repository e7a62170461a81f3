"""The built-in real-text corpus (hf_ssm/data/python_stdlib.py): three disjoint sets of whole files, the same on every
call, with no family of near-duplicates on two sides, fingerprinted, and refused clearly when the standard library is
missing, empty or too small."""

from __future__ import annotations

import itertools

import pytest

from hf_ssm.data import python_stdlib as stdlib
from hf_ssm.data.lm_corpus import CorpusSpec, DocumentSource


@pytest.fixture(scope="module")
def corpus():
    return stdlib.PythonStdlibCorpus()


def test_the_three_sets_are_disjoint_cover_every_file_and_are_large_enough(corpus):
    """Every file is in exactly one set; validation and test each hold at least MIN_HELD_OUT_BYTES."""
    paths = {s: {f.path for f in corpus.splits[s]} for s in stdlib.SPLITS}
    for a, b in itertools.combinations(stdlib.SPLITS, 2):
        assert not paths[a] & paths[b], (a, b)
    assert set().union(*paths.values()) == {f.path for f in corpus.files}
    for split in ("validation", "test"):
        assert sum(f.size for f in corpus.splits[split]) >= stdlib.MIN_HELD_OUT_BYTES


def test_the_split_is_deterministic(corpus):
    """Listing and splitting again gives the same files in the same order, and the same fingerprint."""
    again = stdlib.PythonStdlibCorpus()
    assert {s: [f.path for f in v] for s, v in again.splits.items()} == {
        s: [f.path for f in v] for s, v in corpus.splits.items()
    }
    assert again.fingerprint == corpus.fingerprint


def test_no_family_straddles_the_sets_and_train_only_families_stay_in_training(corpus):
    """A family (package, or module with its pure-Python twin) lies on one side; encodings, pydoc_data and the
    packages distributions split out are never held out; no test folder is read."""
    side = {}
    for split, files in corpus.splits.items():
        for f in files:
            assert side.setdefault(f.family, split) == split, f.family
    for family in stdlib.TRAIN_ONLY:
        assert side.get(family, "train") == "train", family
    assert side["encodings"] == "train"
    assert not any(part in stdlib.TEST_FOLDERS for f in corpus.files for part in f.path.split("/")[:-1])
    assert not any(f.path.startswith(("site-packages/", "dist-packages/")) for f in corpus.files)


def _lines(path) -> set[str]:
    return {line.strip() for line in path.read_text(encoding="utf-8").splitlines() if len(line.strip()) > 20}


def test_no_held_out_file_is_a_near_duplicate_of_a_training_file(corpus):
    """No validation or test file has more than half of its distinct long lines in any one training file (0.24 at
    most on Python 3.11; two codec tables of encodings/ share 65 %: the check finds such a pair when split)."""
    train = [(f.path, _lines(corpus.root / f.path)) for f in corpus.splits["train"]]
    for f in corpus.splits["validation"] + corpus.splits["test"]:
        mine = _lines(corpus.root / f.path)
        if len(mine) < 10:
            continue
        path, shared = max(((p, len(mine & theirs)) for p, theirs in train), key=lambda x: x[1])
        assert shared / len(mine) <= 0.5, (f.path, path, shared / len(mine))
    codecs = dict(t for t in train if t[0] in ("encodings/cp1250.py", "encodings/cp1251.py"))
    assert len(codecs) == 2
    first, second = codecs["encodings/cp1250.py"], codecs["encodings/cp1251.py"]
    assert len(first & second) / len(first) > 0.5  # 0.65: the check would catch this pair split


def _fake_library(root, sizes: dict[str, int]):
    for rel, size in sizes.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x" * (size - 1) + "\n")
    return root


def test_families_join_a_module_and_its_pure_python_twin(tmp_path):
    """`_pydecimal.py` joins `decimal`, `_pyio.py` joins `io`, a package's files share its name; test folders,
    site-packages and config-* are not read."""
    root = _fake_library(
        tmp_path,
        {
            "decimal.py": 10,
            "_pydecimal.py": 10,
            "io.py": 10,
            "_pyio.py": 10,
            "pyclbr.py": 10,
            "email/parser.py": 10,
            "email/test/test_x.py": 10,
            "site-packages/pkg.py": 10,
            "config-3.11-x86_64-linux-gnu/python-config.py": 10,
        },
    )
    families = {f.path: f.family for f in stdlib.list_files(root)}
    assert families == {
        "_pydecimal.py": "decimal",
        "_pyio.py": "io",
        "decimal.py": "decimal",
        "email/parser.py": "email",
        "io.py": "io",
        "pyclbr.py": "pyclbr",
    }


def test_the_fingerprint_changes_with_the_file_list(tmp_path):
    """Python version, file count, bytes and the listing's hash are recorded; one file's size changes the hash."""
    root = _fake_library(tmp_path, {f"m{i}.py": 40_000 for i in range(40)})
    first = stdlib.PythonStdlibCorpus(root).fingerprint
    assert first["files"] == 40 and first["bytes"] == 1_600_000 and first["python"]
    (root / "m3.py").write_text("y" * 10)
    second = stdlib.PythonStdlibCorpus(root).fingerprint
    assert second["listing_sha256"] != first["listing_sha256"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: root / "missing", "does not exist"),
        (lambda root: root, "no .py files"),
        (lambda root: _fake_library(root, {f"m{i}.py": 20_000 for i in range(10)}), "too small for a test set"),
    ],
)
def test_a_missing_empty_or_small_library_is_refused(tmp_path, make, message):
    """A missing folder, one without library files, or one too small for the held-out sets: ValueError saying so."""
    with pytest.raises(ValueError, match=message):
        stdlib.PythonStdlibCorpus(make(tmp_path))


def test_the_lm_data_source_reads_the_training_and_validation_files(corpus):
    """`--dataset python_stdlib` (the pretraining default) trains on the training files and evaluates on the
    validation files, in path order."""
    assert CorpusSpec().dataset == "python_stdlib"
    source = DocumentSource(CorpusSpec(dataset="python_stdlib"))
    first_train = next(source.train_documents())
    first_eval = next(source.eval_documents())
    assert first_train == next(corpus.documents("train"))
    assert first_eval == next(corpus.documents("validation"))
    assert source.fingerprint == corpus.fingerprint


@pytest.fixture
def small_library(tmp_path, monkeypatch):
    """A 30-file fake standard library with held-out sets of 6 KB, served as this interpreter's corpus."""
    monkeypatch.setattr(stdlib, "HELD_OUT_BYTES", 6_000)
    monkeypatch.setattr(stdlib, "MIN_HELD_OUT_BYTES", 3_000)
    root = tmp_path / "lib"
    for i in range(30):
        (root / f"mod{i}.py").parent.mkdir(parents=True, exist_ok=True)
        (root / f"mod{i}.py").write_text("".join(f"def f{i}_{j}(x):\n    return x * {j}\n" for j in range(80)))
    monkeypatch.setattr(stdlib, "default_corpus", lambda: stdlib.PythonStdlibCorpus(root))
    return root


def test_a_pretraining_run_records_the_corpus_and_refuses_a_resume_on_another(small_library, tmp_path):
    """metrics.json and every checkpoint hold the corpus fingerprint; a resume whose standard library differs (here
    one file grew, as another Python's would) is refused naming what differs."""
    from hf_ssm.training.lm.lm_settings import PretrainSettings
    from hf_ssm.training.lm.pretraining import pretrain

    settings = PretrainSettings(
        extra_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "mixers": "A"},
        block_size=32, batch_size=2, eval_blocks=2, warmup_steps=1, sample_tokens=0, max_steps=2, eval_every=2,
        save_every=1,
    )  # fmt: skip
    assert settings.dataset == "python_stdlib"
    metrics = pretrain(settings, tmp_path / "run")
    expected = stdlib.default_corpus().fingerprint
    assert metrics["corpus"] == expected and metrics["dataset"] == "python_stdlib"
    (small_library / "mod3.py").write_text("x = 1\n" * 900)
    with pytest.raises(ValueError, match=r"another corpus .*listing_sha256"):
        pretrain(settings, tmp_path / "run", resume=True)
