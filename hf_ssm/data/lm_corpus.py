"""Language-model corpora: the built-in generated corpus, loading text from the Hub or local files, and packing.

Documents -> token ids -> fixed-length blocks. Every document is followed by the tokenizer's EOS id and the
documents are concatenated and cut into blocks of `block_size` tokens (a document may continue into the next
block; the incomplete last block is dropped). With `reset_at_boundaries` every block also carries `position_ids`
that restart at 0 at each document, and no attention mask: the hybrid model then masks attention block-diagonally
and restarts every SSM state at each document (see `hf_ssm/modeling/packing.py`), and the label of a document's
first token is ignored (it would be predicted from the previous document). Without it, position_ids run 0..L-1
and the model sees one continuous stream.

Two kinds of block source, both addressed by a global block index so that a training step's data is a pure
function of the data position (exact resume, any number of processes):

- `InMemoryBlocks`: the whole corpus tokenized once; epoch e visits the blocks in a permutation seeded by
  (seed, e).
- `StreamingBlocks`: documents read lazily (a `datasets` streaming dataset, or the generator of the built-in
  corpus); the reader can save its position (documents read, the partial block pending) and restore it without
  re-tokenizing what came before.

Two corpora are built in, both offline. `python_stdlib` (the pretraining default) is real text: the `.py` files of
the running interpreter's standard library, split into training, validation and test files (hf_ssm/data/
python_stdlib.py). The generated corpus (`--dataset builtin`) comes from a seeded generator, deterministic: short
stories in which a character's count of objects changes sentence by sentence (`builtin` / `builtin:stories`), and
short question/answer pairs about such counts (`builtin:dialogues`, the default fine-tuning set).

`LocalFilesCorpus` is the counterpart of the standard-library corpus for one's own files: training, validation
and test files given apart (benchmarks/bench_lm.py's `--train_files`, `--validation_files`, `--test_files`), read
as `--train_files` are, with a fingerprint of every file (name, size, sha256).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

BUILTIN_STYLES = ("stories", "dialogues")
PYTHON_STDLIB = "python_stdlib"
LOCAL_FILES = "local_files"  # the `dataset` of a LocalFilesCorpus fingerprint
IGNORE_INDEX = -100

# --------------------------------------------------------------------------------------------------------------
# The built-in corpus
# --------------------------------------------------------------------------------------------------------------

_NAMES = {
    "she": ["Mia", "Ava", "Zoe", "Lily", "Nora", "Ella", "Ruby", "Ivy", "Anna", "Maya"],
    "he": ["Leo", "Sam", "Max", "Tom", "Ben", "Finn", "Jack", "Owen", "Noah", "Eli"],
}
_OBJECTS = ["apple", "ball", "book", "shell", "coin", "kite", "cookie", "marble", "flower", "stone", "cup", "hat"]
_PLACES = ["park", "garden", "kitchen", "forest", "beach", "school", "market", "river", "farm", "library"]
_WEATHER = ["sunny", "rainy", "windy", "quiet", "cold", "warm", "bright", "grey"]
_FEELINGS = ["happy", "sad", "tired", "excited", "calm", "proud", "surprised", "sleepy"]
_NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
_MAX_COUNT = len(_NUMBERS) - 1


def _things(count: int, obj: str) -> str:
    return f"{_NUMBERS[count]} {obj}{'' if count == 1 else 's'}"


class _Character:
    def __init__(self, rng: random.Random):
        self.pronoun = rng.choice(["she", "he"])
        self.name = rng.choice(_NAMES[self.pronoun])
        self.object_pronoun = "her" if self.pronoun == "she" else "him"
        friend_pronoun = rng.choice(["she", "he"])
        self.friend = rng.choice([n for n in _NAMES[friend_pronoun] if n != self.name])


def _count_event(rng: random.Random, who: _Character, count: int, obj: str) -> tuple[str, int]:
    """One sentence that changes (or keeps) the count, and the new count."""
    gain = rng.randint(1, 3)
    loss = rng.randint(1, 3)
    options = []
    if count + gain <= _MAX_COUNT:
        options += [
            (f"{who.friend} gave {who.object_pronoun} {_things(gain, obj)}.", count + gain),
            (f"{who.pronoun.capitalize()} found {_things(gain, obj)} near the {rng.choice(_PLACES)}.", count + gain),
            (f"Then {who.name} bought {_things(gain, obj)} at the market.", count + gain),
        ]
    if count - loss >= 0:
        options += [
            (f"{who.pronoun.capitalize()} gave {_things(loss, obj)} to {who.friend}.", count - loss),
            (f"{who.name} lost {_things(loss, obj)} on the way home.", count - loss),
        ]
    options += [
        (f"The sky was {rng.choice(_WEATHER)}.", count),
        (f"{who.friend} laughed and waved.", count),
        (f"{who.pronoun.capitalize()} felt {rng.choice(_FEELINGS)}.", count),
    ]
    return rng.choice(options)


def _story(rng: random.Random) -> str:
    who = _Character(rng)
    obj = rng.choice(_OBJECTS)
    place, weather = rng.choice(_PLACES), rng.choice(_WEATHER)
    opening = rng.choice(
        [
            f"Once upon a time, {who.name} went to the {place}.",
            f"One {weather} morning, {who.name} walked to the {place}.",
            f"{who.name} lived near the {place}.",
            f"It was a {weather} day at the {place}.",
        ]
    )
    count = rng.randint(1, 6)
    sentences = [opening, f"{who.name} had {_things(count, obj)}."]
    for _ in range(rng.randint(2, 5)):
        sentence, count = _count_event(rng, who, count, obj)
        sentences.append(sentence)
    sentences.append(f"In the end, {who.name} had {_things(count, obj)}.")
    if rng.random() < 0.5:
        sentences.append(f"{who.pronoun.capitalize()} was very {rng.choice(_FEELINGS)}.")
    return " ".join(sentences)


def _dialogue(rng: random.Random) -> str:
    who = _Character(rng)
    obj = rng.choice(_OBJECTS)
    start = count = rng.randint(1, 6)
    events = []
    for _ in range(rng.randint(1, 3)):
        sentence, new = _count_event(rng, who, count, obj)
        if new != count:  # only sentences that change the count
            events.append(sentence)
            count = new
    story = " ".join([f"{who.name} has {_things(start, obj)}.", *events])
    return f"Question: {story} How many {obj}s does {who.name} have now?\nAnswer: {who.name} has {_things(count, obj)}."


_GENERATORS: dict[str, Callable[[random.Random], str]] = {"stories": _story, "dialogues": _dialogue}


def iter_builtin_documents(style: str = "stories", seed: int = 0, num_documents: int | None = None) -> Iterator[str]:
    """Documents of the built-in corpus, deterministic in (style, seed); endless when num_documents is None."""
    if style not in _GENERATORS:
        raise ValueError(f"unknown built-in corpus style {style!r}; choose from {list(BUILTIN_STYLES)}")
    rng = random.Random(f"hf_ssm-{style}-{seed}")
    counter = itertools.count() if num_documents is None else range(num_documents)
    for _ in counter:
        yield _GENERATORS[style](rng)


def builtin_documents(style: str = "stories", seed: int = 0, num_documents: int = 1000) -> list[str]:
    return list(iter_builtin_documents(style, seed, num_documents))


# --------------------------------------------------------------------------------------------------------------
# Where documents come from
# --------------------------------------------------------------------------------------------------------------

_FILE_BUILDERS = {".txt": "text", ".text": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
# The built-in corpus uses its own seeds per split, so train and validation documents are drawn independently.
_BUILTIN_SPLIT_SEED = {"train": 0, "validation": 1_000_003}


@dataclass
class CorpusSpec:
    """Which documents to train and evaluate on (the data part of the training settings)."""

    dataset: str | None = PYTHON_STDLIB
    dataset_config: str | None = None
    train_files: list[str] = field(default_factory=list)
    eval_files: list[str] = field(default_factory=list)
    text_column: str = "text"
    train_split: str = "train"
    eval_split: str | None = None
    text_sample_by: str = "paragraph"
    streaming: bool = False
    builtin_documents: int = 4000
    eval_documents: int = 200
    seed: int = 0

    def describe(self) -> str:
        if self.train_files:
            return ", ".join(Path(f).name for f in self.train_files)
        return self.dataset or PYTHON_STDLIB

    def builtin_style(self) -> str | None:
        """The built-in style named by `dataset` ("builtin" = stories), or None for other data."""
        if self.train_files or not self.dataset or not self.dataset.startswith("builtin"):
            return None
        _, _, style = self.dataset.partition(":")
        style = style or "stories"
        if style not in BUILTIN_STYLES:
            raise ValueError(f"unknown built-in corpus {self.dataset!r}; choose from builtin, builtin:dialogues")
        return style

    def validate(self) -> None:
        """Checks that need no data access: files exist and have a known type, options are consistent."""
        if self.text_sample_by not in ("line", "paragraph", "document"):
            raise ValueError(f"`text_sample_by` must be line, paragraph or document, got {self.text_sample_by!r}")
        if self.eval_documents < 0:
            raise ValueError(f"`eval_documents` must be >= 0, got {self.eval_documents}")
        if self.builtin_style() and self.builtin_documents < 1:
            raise ValueError(f"`builtin_documents` must be >= 1, got {self.builtin_documents}")
        for name, files in (("train_files", self.train_files), ("eval_files", self.eval_files)):
            if files:
                _file_builder(files, name)
        if self.eval_files and not self.train_files:
            raise ValueError("`eval_files` needs `train_files` (or use --eval_split with a dataset)")
        local = (self.dataset or "").startswith(("/", "./", "../", "~"))
        if not self.train_files and local and not Path(self.dataset).expanduser().exists():
            raise ValueError(f"dataset folder not found: {self.dataset}")
        if not self.train_files and not self.dataset:
            raise ValueError(
                "no training data: pass --dataset (a Hub name, a local folder, or builtin) or --train_files"
            )


def corpus_fingerprint(spec: CorpusSpec) -> dict | None:
    """What identifies a built-in real corpus a run trains on (python_stdlib: Python version, file count, bytes, the
    hash of its (path, size) list; hf_ssm/data/python_stdlib.py), or None for other data."""
    if spec.train_files or spec.dataset != PYTHON_STDLIB:
        return None
    from .python_stdlib import default_corpus

    return default_corpus().fingerprint


def _file_builder(files: list[str], what: str) -> str:
    kinds = set()
    for name in files:
        path = Path(name)
        if not path.is_file():
            raise ValueError(f"{what}: file not found: {name}")
        suffix = path.suffix.lower()
        if suffix not in _FILE_BUILDERS:
            raise ValueError(f"{what}: cannot read {name}: known extensions are {sorted(_FILE_BUILDERS)}")
        kinds.add(_FILE_BUILDERS[suffix])
    if len(kinds) > 1:
        raise ValueError(f"{what}: all files must be of one type (text, json/jsonl or parquet), got {sorted(kinds)}")
    return kinds.pop()


def _load_files(files: list[str], spec: CorpusSpec, streaming: bool):
    from datasets import load_dataset

    builder = _file_builder(files, "data files")
    kwargs = {"sample_by": spec.text_sample_by} if builder == "text" else {}
    return load_dataset(builder, data_files=[str(f) for f in files], split="train", streaming=streaming, **kwargs)


def _load_hub(spec: CorpusSpec, split: str, streaming: bool):
    from datasets import load_dataset

    try:
        return load_dataset(spec.dataset, spec.dataset_config, split=split, streaming=streaming)
    except ValueError as err:  # e.g. an unknown split
        raise ValueError(f"could not load split {split!r} of dataset {spec.dataset!r}: {err}") from err
    except Exception as err:  # datasets raises several types for a missing / unreachable dataset
        raise ValueError(f"could not load dataset {spec.dataset!r} (config {spec.dataset_config!r}): {err}") from err


def _has_split(spec: CorpusSpec, split: str) -> bool:
    from datasets import get_dataset_split_names

    try:
        return split in get_dataset_split_names(spec.dataset, spec.dataset_config)
    except Exception as err:
        raise ValueError(f"could not load dataset {spec.dataset!r} (config {spec.dataset_config!r}): {err}") from err


def _texts(dataset, column: str) -> Iterator[str]:
    """The non-empty texts of a datasets Dataset / IterableDataset (or any iterable of dicts or strings)."""
    for row in dataset:
        text = row if isinstance(row, str) else row.get(column) if isinstance(row, dict) else None
        if text is None:
            names = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(f"the data has no text column {column!r} (columns: {names}); pass --text_column")
        if text.strip():
            yield text


class DocumentSource:
    """Re-iterable train / eval document streams for a CorpusSpec.

    When the data has no evaluation split, the first `eval_documents` training documents are held out for
    evaluation and skipped by the training stream.
    """

    def __init__(self, spec: CorpusSpec):
        spec.validate()
        self.spec = spec
        self.style = spec.builtin_style()
        self.held_out = 0
        self.stdlib = None  # the PythonStdlibCorpus of --dataset python_stdlib
        if self.style is None and not spec.train_files and spec.dataset == PYTHON_STDLIB:
            from .python_stdlib import default_corpus

            self.stdlib = default_corpus()
            self._train = self._eval = None
        elif self.style is None and not spec.train_files:
            self._train = _load_hub(spec, spec.train_split, spec.streaming)
            eval_split = spec.eval_split or next(
                (s for s in ("validation", "test") if s != spec.train_split and _has_split(spec, s)), None
            )
            self._eval = _load_hub(spec, eval_split, spec.streaming) if eval_split else None
        elif self.style is None:
            self._train = _load_files(spec.train_files, spec, spec.streaming)
            self._eval = _load_files(spec.eval_files, spec, spec.streaming) if spec.eval_files else None
        else:
            self._train = self._eval = None
        if self.style is None and self.stdlib is None and self._eval is None:
            self.held_out = spec.eval_documents
        # Check the text column now (clear error before training starts).
        next(iter(self.train_documents()), None)

    @property
    def fingerprint(self) -> dict | None:
        """What identifies a built-in real corpus (python_stdlib: Python version, files, bytes, listing hash)."""
        return self.stdlib.fingerprint if self.stdlib is not None else None

    def train_documents(self, epoch: int = 0) -> Iterator[str]:
        if self.stdlib is not None:
            return self.stdlib.documents("train")
        if self.style is not None:
            if self.spec.streaming:
                return iter_builtin_documents(self.style, _BUILTIN_SPLIT_SEED["train"] + self.spec.seed)
            return iter_builtin_documents(
                self.style, _BUILTIN_SPLIT_SEED["train"] + self.spec.seed, self.spec.builtin_documents
            )
        return itertools.islice(_texts(self._train, self.spec.text_column), self.held_out, None)

    def eval_documents(self) -> Iterator[str]:
        if self.stdlib is not None:
            return itertools.islice(self.stdlib.documents("validation"), self.spec.eval_documents or None)
        if self.style is not None:
            seed = _BUILTIN_SPLIT_SEED["validation"] + self.spec.seed
            return iter_builtin_documents(self.style, seed, self.spec.eval_documents)
        if self._eval is not None:
            return itertools.islice(_texts(self._eval, self.spec.text_column), self.spec.eval_documents or None)
        return itertools.islice(_texts(self._train, self.spec.text_column), self.held_out)


class LocalFilesCorpus:
    """Training, validation and test documents from local files, one list of files per split (the
    `--train_files`, `--validation_files` and `--test_files` of benchmarks/bench_lm.py): the counterpart of
    PythonStdlibCorpus (`documents(split)`, `fingerprint`) for a corpus of one's own.

    Each split is read as CorpusSpec reads `--train_files` (the same `datasets` builders: `.txt` / `.text` one
    document per paragraph, line or file by `text_sample_by`; `.json` / `.jsonl` / `.parquet` one document per row
    from `text_column`; empty documents skipped), in the order the files are given. Raises ValueError naming the
    flag (`--<split>_files`) of a missing split, a missing or unreadable file, or a file whose bytes appear in two
    splits (a held-out file would then be trained on)."""

    def __init__(self, files: dict[str, list[str]], text_column: str = "text", text_sample_by: str = "paragraph"):
        from .python_stdlib import SPLITS

        unknown = sorted(set(files) - set(SPLITS))
        if unknown:
            raise ValueError(f"unknown splits {unknown}; the splits are {list(SPLITS)}")
        self.files = {split: [str(f) for f in files.get(split) or []] for split in SPLITS}
        self.formats = {}
        for split, names in self.files.items():
            if not names:
                raise ValueError(f"--{split}_files: no file given; a corpus needs {', '.join(SPLITS)} files")
            self.formats[split] = _file_builder(names, f"--{split}_files")
        self.specs = {
            split: CorpusSpec(dataset=None, train_files=names, text_column=text_column, text_sample_by=text_sample_by)
            for split, names in self.files.items()
        }
        for spec in self.specs.values():
            spec.validate()  # the options (text_sample_by); the files were checked above, naming their flag
        self.listing = {split: [_file_entry(f) for f in names] for split, names in self.files.items()}
        self._refuse_shared_files()
        self.fingerprint = self._fingerprint(text_column, text_sample_by)

    def _refuse_shared_files(self) -> None:
        seen: dict[str, tuple[str, str]] = {}
        for split, entries in self.listing.items():
            for name, entry in zip(self.files[split], entries):
                other = seen.setdefault(entry["sha256"], (split, name))
                if other[0] != split:
                    raise ValueError(
                        f"--{split}_files: {name} has the same bytes as {other[1]} of --{other[0]}_files; "
                        "the three splits must be disjoint"
                    )

    def _fingerprint(self, text_column: str, text_sample_by: str) -> dict:
        """What identifies the corpus a run saw: per split the files (name, size, sha256 of the bytes) and how they
        are read, totals, and the sha256 of the whole listing."""
        formats = set(self.formats.values())
        reading = {"text_sample_by": text_sample_by} if "text" in formats else {}
        if formats - {"text"}:
            reading["text_column"] = text_column
        entries = [e for split in self.listing.values() for e in split]
        splits = {
            split: {"format": self.formats[split], "files": len(v), "bytes": sum(e["size"] for e in v), "listing": v}
            for split, v in self.listing.items()
        }
        listing = json.dumps({s: [[e["size"], e["sha256"]] for e in v] for s, v in self.listing.items()}).encode()
        return {
            "dataset": LOCAL_FILES,
            **reading,
            "files": len(entries),
            "bytes": sum(e["size"] for e in entries),
            "listing_sha256": hashlib.sha256(listing).hexdigest(),
            "splits": splits,
        }

    def documents(self, split: str) -> Iterator[str]:
        """The non-empty documents of `split`'s files, in the order given."""
        if split not in self.specs:
            raise ValueError(f"split must be one of {list(self.specs)}, got {split!r}")
        spec = self.specs[split]
        return _texts(_load_files(spec.train_files, spec, streaming=False), spec.text_column)


def _file_entry(name: str) -> dict:
    """{"name": the file's name (not its folder), "size": bytes, "sha256": of its bytes}."""
    path = Path(name)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return {"name": path.name, "size": path.stat().st_size, "sha256": digest.hexdigest()}


# --------------------------------------------------------------------------------------------------------------
# Tokenizing and packing
# --------------------------------------------------------------------------------------------------------------


def encode_texts(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens (the byte tokenizer's fast path when available)."""
    fast = getattr(tokenizer, "fast_encode", None)
    if fast is not None:
        return fast(texts)
    return tokenizer(texts, add_special_tokens=False, return_attention_mask=False, verbose=False)["input_ids"]


def _encoded(tokenizer, documents: Iterable[str], batch: int = 256) -> Iterator[list[int]]:
    iterator = iter(documents)
    while chunk := list(itertools.islice(iterator, batch)):
        yield from encode_texts(tokenizer, chunk)


class BlockPacker:
    """Concatenates documents (each followed by EOS) and cuts the stream into blocks of `block_size` tokens.

    `state()` / `load_state()` save and restore the pending partial block, so a reader can resume exactly.
    """

    def __init__(self, block_size: int, eos_token_id: int):
        self.block_size, self.eos = block_size, eos_token_id
        self.ids: list[int] = []
        self.starts: list[bool] = []

    def add(self, ids: list[int]) -> Iterator[tuple[list[int], list[bool]]]:
        """Add one document; yields every block it completes as (ids, document-start flags)."""
        doc = [*ids, self.eos]
        self.ids.extend(doc)
        self.starts.extend([True] + [False] * (len(doc) - 1))
        while len(self.ids) >= self.block_size:
            block = self.ids[: self.block_size], self.starts[: self.block_size]
            del self.ids[: self.block_size], self.starts[: self.block_size]  # before yielding: state() is exact
            yield block

    def state(self) -> dict:
        return {"ids": list(self.ids), "starts": list(self.starts)}

    def load_state(self, state: dict) -> None:
        self.ids, self.starts = list(state["ids"]), [bool(s) for s in state["starts"]]


def pack_documents(tokenizer, documents: Iterable[str], block_size: int, max_blocks: int | None = None):
    """Tokenize and pack documents into (N, block_size) tensors: input ids (long) and document starts (bool)."""
    eos = _eos_id(tokenizer)
    packer, ids, starts = BlockPacker(block_size, eos), [], []
    for doc in _encoded(tokenizer, documents):
        for block_ids, block_starts in packer.add(doc):
            ids.append(block_ids)
            starts.append(block_starts)
        if max_blocks is not None and len(ids) >= max_blocks:
            ids, starts = ids[:max_blocks], starts[:max_blocks]
            break
    if not ids:
        return torch.zeros(0, block_size, dtype=torch.long), torch.zeros(0, block_size, dtype=torch.bool)
    return torch.tensor(ids, dtype=torch.long), torch.tensor(starts, dtype=torch.bool)


def _eos_id(tokenizer) -> int:
    eos = tokenizer.eos_token_id
    if eos is None:
        eos = getattr(tokenizer, "sep_token_id", None)
    if eos is None:
        raise ValueError("the tokenizer has no eos_token (needed between packed documents); set one")
    return int(eos)


def positions_from_starts(starts: torch.Tensor) -> torch.Tensor:
    """(B, L) document-start flags -> position ids restarting at 0 at each start (and at every row start)."""
    steps = torch.arange(starts.shape[-1], device=starts.device).expand_as(starts)
    marks = torch.where(starts, steps, torch.zeros_like(steps))
    marks[..., 0] = 0
    return steps - torch.cummax(marks, dim=-1).values


def make_batch(ids: torch.Tensor, starts: torch.Tensor, reset_at_boundaries: bool) -> dict[str, torch.Tensor]:
    """Model inputs of packed blocks: input_ids, position_ids (restarting per document when resetting), labels."""
    labels = ids.clone()
    if reset_at_boundaries:
        position_ids = positions_from_starts(starts)
        labels[starts] = IGNORE_INDEX  # a document's first token is not predicted from the previous document
    else:
        position_ids = torch.arange(ids.shape[1]).expand_as(ids).contiguous()
    return {"input_ids": ids, "position_ids": position_ids, "labels": labels}


class InMemoryBlocks:
    """All blocks in memory; global block i is block perm_e[i mod N] of epoch e = i div N (perm seeded by e)."""

    def __init__(self, ids: torch.Tensor, starts: torch.Tensor, seed: int = 0, shuffle: bool = True):
        if len(ids) == 0:
            raise ValueError("the training data yields no complete block: use more data or a smaller --block_size")
        self.ids, self.starts, self.seed, self.shuffle = ids, starts, seed, shuffle
        self._epoch, self._perm = None, None

    def __len__(self) -> int:
        return len(self.ids)

    def _order(self, epoch: int) -> torch.Tensor:
        if self._epoch != epoch:
            if self.shuffle:
                gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                self._perm = torch.randperm(len(self.ids), generator=gen)
            else:
                self._perm = torch.arange(len(self.ids))
            self._epoch = epoch
        return self._perm

    def blocks(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = [int(self._order(i // len(self.ids))[i % len(self.ids)]) for i in range(start, start + count)]
        return self.ids[index], self.starts[index]

    def advance_to(self, position: int) -> None:
        pass

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict, position: int) -> None:
        pass


class StreamingBlocks:
    """Blocks read lazily from a document stream, in order; epochs restart the stream.

    Reading is sequential: `blocks(start, count)` requires `start` to be at or after the reader's position
    (blocks between are skipped). `state()` records the documents read and the pending partial block, so
    `load_state` continues exactly where a checkpoint was taken without re-reading the documents' text.
    """

    def __init__(self, documents: Callable[[int], Iterator[str]], tokenizer, block_size: int):
        self.documents, self.tokenizer, self.block_size = documents, tokenizer, block_size
        self.position = 0  # global index of the next block the reader returns
        self.epoch = 0
        self.documents_read = 0  # documents consumed in the current epoch
        self.packer = BlockPacker(block_size, _eos_id(tokenizer))
        self._iter: Iterator[tuple[list[int], list[bool]]] | None = None

    def _open(self, skip_documents: int) -> None:
        docs = itertools.islice(self.documents(self.epoch), skip_documents, None)
        self.documents_read = skip_documents
        self._iter = self._blocks_of(docs)

    def _blocks_of(self, docs: Iterator[str]) -> Iterator[tuple[list[int], list[bool]]]:
        for doc in _encoded(self.tokenizer, docs, batch=64):
            self.documents_read += 1
            yield from self.packer.add(doc)

    def _next_block(self) -> tuple[list[int], list[bool]]:
        if self._iter is None:
            self._open(self.documents_read)
        while True:
            block = next(self._iter, None)
            if block is not None:
                return block
            if self.documents_read == 0:
                raise ValueError("the training stream has no documents")
            self.epoch += 1  # end of the data: the stream continues with the next pass
            self._open(0)

    def blocks(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        if start < self.position:
            raise ValueError(f"streaming data is read in order: block {start} requested after block {self.position}")
        self.advance_to(start)
        ids, starts = [], []
        for _ in range(count):
            block_ids, block_starts = self._next_block()
            ids.append(block_ids)
            starts.append(block_starts)
            self.position += 1
        return torch.tensor(ids, dtype=torch.long), torch.tensor(starts, dtype=torch.bool)

    def advance_to(self, position: int) -> None:
        """Skip to global block `position` (every process calls this after a step, so that all readers, and the
        state a checkpoint saves, are at the same place)."""
        while self.position < position:
            self._next_block()
            self.position += 1

    def state(self) -> dict:
        return {"epoch": self.epoch, "documents_read": self.documents_read, "pending": self.packer.state()}

    def load_state(self, state: dict, position: int) -> None:
        self.position, self.epoch = position, int(state["epoch"])
        self.packer.load_state(state["pending"])
        self._open(int(state["documents_read"]))


def build_block_sources(spec: CorpusSpec, tokenizer, block_size: int, eval_blocks: int):
    """(train block source, eval (ids, starts) tensors) for a CorpusSpec."""
    if block_size < 2:
        raise ValueError(f"`block_size` must be >= 2, got {block_size}")
    source = DocumentSource(spec)
    eval_ids, eval_starts = pack_documents(tokenizer, source.eval_documents(), block_size, max_blocks=eval_blocks)
    if spec.streaming:
        train = StreamingBlocks(source.train_documents, tokenizer, block_size)
    else:
        ids, starts = pack_documents(tokenizer, source.train_documents(), block_size)
        train = InMemoryBlocks(ids, starts, seed=spec.seed)
    return train, (eval_ids, eval_starts)


__all__ = [
    "BUILTIN_STYLES",
    "LOCAL_FILES",
    "PYTHON_STDLIB",
    "BlockPacker",
    "CorpusSpec",
    "DocumentSource",
    "InMemoryBlocks",
    "LocalFilesCorpus",
    "StreamingBlocks",
    "build_block_sources",
    "builtin_documents",
    "corpus_fingerprint",
    "encode_texts",
    "iter_builtin_documents",
    "make_batch",
    "pack_documents",
    "positions_from_starts",
]
