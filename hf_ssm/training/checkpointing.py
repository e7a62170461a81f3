"""Crash-safe checkpoint folders: write to a temporary sibling, then rename into place.

A checkpoint folder is either complete or absent: an interrupted save leaves only a `*.tmp-*` folder, which
`latest_checkpoint` ignores and the next save removes, so a good checkpoint is never replaced by a broken one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

COMPLETE_MARKER = "checkpoint_complete.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def atomic_save_dir(target: str | os.PathLike, write: Callable[[Path], None], metadata: dict | None = None) -> Path:
    """Call `write(tmp_dir)` and move the result to `target` in one rename; returns `target`.

    An older folder at `target` is replaced only after the new one is fully written.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f"{target.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=target.parent))
    try:
        write(tmp)
        (tmp / COMPLETE_MARKER).write_text(json.dumps(metadata or {}, indent=2))
        if target.exists():
            old = target.with_name(f"{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def is_complete(folder: str | os.PathLike) -> bool:
    return (Path(folder) / COMPLETE_MARKER).is_file()


def latest_checkpoint(checkpoints_dir: str | os.PathLike) -> Path | None:
    """The complete `step_<n>` folder with the largest n, or None."""
    root = Path(checkpoints_dir)
    if not root.is_dir():
        return None
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and is_complete(child):
            found.append((int(match.group(1)), child))
    return max(found)[1] if found else None


def read_metadata(folder: str | os.PathLike) -> dict:
    return json.loads((Path(folder) / COMPLETE_MARKER).read_text())


def prune_checkpoints(checkpoints_dir: str | os.PathLike, keep: int) -> None:
    """Delete all but the newest `keep` complete step folders."""
    root = Path(checkpoints_dir)
    steps = sorted((int(m.group(1)), c) for c in root.iterdir() if (m := _STEP_DIR.match(c.name)) and is_complete(c))
    for _, folder in steps[:-keep] if keep > 0 else []:
        shutil.rmtree(folder, ignore_errors=True)
