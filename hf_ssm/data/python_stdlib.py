"""The Python standard library as a real-text corpus, offline on every machine (`--dataset python_stdlib`).

Documents are the `.py` files of the running interpreter's standard library (`sysconfig.get_paths()["stdlib"]`),
one document per file (an empty file gives none), read as UTF-8 in sorted path order; site-packages / dist-packages, the `config-*` build folder
and every file under a `test`, `tests` or `idle_test` folder are left out.

Three disjoint sets of whole files (docs/design.md §11.1):

- Files are grouped into *families*: the top-level package or module a file belongs to, with a leading underscore
  and a pure-Python `py` prefix removed when the rest names another family (`_pydecimal.py` joins `decimal`,
  `_pyio.py` joins `io`), so a module and its twin never straddle the sets.
- Families that are near-duplicates, data rather than code, or split out of the standard library by some Linux
  distributions stay in training (TRAIN_ONLY: the 122 codec tables of `encodings/`, `pydoc_data/topics.py`'s 757 KB
  of prose, `idlelib`, `tkinter`, `turtledemo`, `turtle`, `lib2to3`, `distutils`, `ensurepip`, `venv`, the build's
  `_sysconfigdata*` and the frozen-module demo `__phello__`); so do families over HELD_OUT_FAMILY_BYTES, so that
  no one module dominates a held-out set.
- The other families are ordered by the sha256 of their name and dealt out: validation until it holds
  HELD_OUT_BYTES, then test until it holds HELD_OUT_BYTES, the rest to training. The rule reads only names and
  sizes, so the split is a pure function of the standard library's file list.

On Python 3.11.7 (Linux) that gives 733 files, 12.1 MB: training 11.26 MB, validation 18 families / 446 KB, test
10 families / 413 KB. Other Python versions and distributions ship other files (the split then differs): every run
records the corpus fingerprint (Python version, file count, bytes, a hash of the sorted (path, size) list), and
`python -m hf_ssm.data.python_stdlib` prints the split of this machine.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sysconfig
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SPLITS = ("train", "validation", "test")
# Folders whose files are tests of the library, not the library.
TEST_FOLDERS = frozenset({"test", "tests", "idle_test"})
# Families kept in training: near-duplicates (encodings' codec tables), data-only modules (pydoc_data), and
# packages that distributions split out (Debian's idle / tk / lib2to3 / venv packages), so that the held-out sets
# are the same wherever the same Python version is installed.
TRAIN_ONLY = frozenset(
    {
        "encodings",
        "pydoc_data",
        "idlelib",
        "tkinter",
        "turtledemo",
        "turtle",
        "lib2to3",
        "distutils",
        "ensurepip",
        "venv",
        "phello",
        "sysconfigdata",
    }
)
HELD_OUT_BYTES = 400_000  # each of validation and test holds at least this much text
HELD_OUT_FAMILY_BYTES = 100_000  # a larger family stays in training
MIN_HELD_OUT_BYTES = 150_000  # a standard library too small to give this much is refused


@dataclass(frozen=True)
class StdlibFile:
    path: str  # relative to the standard library root, "/"-separated
    size: int  # bytes on disk
    family: str


def stdlib_root() -> Path:
    """The running interpreter's standard library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def _is_library_file(rel: Path) -> bool:
    top = rel.parts[0]
    if top in ("site-packages", "dist-packages") or top.startswith("config-"):
        return False
    return not any(part in TEST_FOLDERS for part in rel.parts[:-1])


def _family(rel: str, stems: set[str]) -> str:
    name = rel.split("/")[0].removesuffix(".py").lstrip("_")
    if name.startswith("sysconfigdata"):
        return "sysconfigdata"
    if name.startswith("py") and name[2:] in stems:
        return name[2:]
    return name


def list_files(root: str | Path | None = None) -> list[StdlibFile]:
    """The corpus files of the standard library at `root` (default: this interpreter's), sorted by path.

    Raises ValueError when the folder is missing or holds no library file."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise ValueError(f"python_stdlib: the standard library folder {root} does not exist")
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _is_library_file(rel) and path.is_file():
            found.append((rel.as_posix(), path.stat().st_size))
    if not found:
        raise ValueError(f"python_stdlib: no .py files of the standard library under {root}")
    stems = {_family(rel, set()) for rel, _ in found}
    return [StdlibFile(rel, size, _family(rel, stems)) for rel, size in found]


def _family_key(family: str) -> str:
    return hashlib.sha256(f"python_stdlib/{family}".encode()).hexdigest()


def split_files(files: list[StdlibFile]) -> dict[str, list[StdlibFile]]:
    """{split: files (sorted by path)} by the module docstring's rule. Raises ValueError when validation or test
    would hold less than MIN_HELD_OUT_BYTES."""
    families: dict[str, list[StdlibFile]] = {}
    for f in files:
        families.setdefault(f.family, []).append(f)
    sizes = dict.fromkeys(SPLITS, 0)
    side_of = {}
    for family in sorted(families, key=_family_key):
        total = sum(f.size for f in families[family])
        if family in TRAIN_ONLY or total > HELD_OUT_FAMILY_BYTES:
            side = "train"
        else:
            side = next((s for s in ("validation", "test") if sizes[s] < HELD_OUT_BYTES), "train")
        side_of[family] = side
        sizes[side] += total
    for split in ("validation", "test"):
        if sizes[split] < MIN_HELD_OUT_BYTES:
            raise ValueError(
                f"python_stdlib: the standard library is too small for a {split} set of {MIN_HELD_OUT_BYTES:,} bytes "
                f"(it gives {sizes[split]:,}); pass --train_files / --eval_files instead"
            )
    return {split: [f for f in files if side_of[f.family] == split] for split in SPLITS}


def fingerprint(files: list[StdlibFile], splits: dict[str, list[StdlibFile]] | None = None) -> dict:
    """What identifies the corpus a run saw: Python version, file count, bytes, sha256 of the sorted (path, size)
    list, and per split the file count and bytes."""
    listing = json.dumps(sorted((f.path, f.size) for f in files)).encode()
    record = {
        "dataset": "python_stdlib",
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "files": len(files),
        "bytes": sum(f.size for f in files),
        "listing_sha256": hashlib.sha256(listing).hexdigest(),
    }
    if splits is not None:
        record["splits"] = {s: {"files": len(v), "bytes": sum(f.size for f in v)} for s, v in splits.items()}
    return record


class PythonStdlibCorpus:
    """The three sets of the standard library at `root` (default: this interpreter's)."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else stdlib_root()
        self.files = list_files(self.root)
        self.splits = split_files(self.files)
        self.fingerprint = fingerprint(self.files, self.splits)

    def documents(self, split: str):
        """The texts of `split`'s files in path order (an iterator; each file read when reached)."""
        if split not in SPLITS:
            raise ValueError(f"python_stdlib split must be one of {list(SPLITS)}, got {split!r}")
        for f in self.splits[split]:
            path = self.root / f.path
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"python_stdlib: {path} is not UTF-8 text: {err}") from err
            if text.strip():
                yield text

    def families(self, split: str) -> list[str]:
        return sorted({f.family for f in self.splits[split]})


@cache
def default_corpus() -> PythonStdlibCorpus:
    """This interpreter's corpus, listed once per process."""
    return PythonStdlibCorpus()


def main() -> None:
    corpus = default_corpus()
    print(json.dumps(corpus.fingerprint, indent=2))
    for split in SPLITS:
        print(f"{split}: {', '.join(corpus.families(split))}")


if __name__ == "__main__":
    main()
