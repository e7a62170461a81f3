"""What the training drivers report besides their checkpoints (state tracking, time series, the adapter
experiment, the causal-LM runs): the Markdown results tables (the table itself and the accuracy-by-bucket cells;
each driver keeps its own columns), the figure plumbing of their plots (matplotlib imported only when a plot is
drawn, on the file-only Agg backend: no display on a training machine), and `merge_summary`, which merges a run's
records into a summary JSON file shared by concurrent runs (results/state_tracking/summary.json,
results/adapter/summary.json), each with its own key.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table: the `header` cells, the separator, then one line per row (cells str()-ed; an empty cell
    is written "| |")."""
    lines = [_line(header), "|" + "---|" * len(header)] + [_line(row) for row in rows]
    return "\n".join(lines)


def _line(cells: list) -> str:
    return "|" + "".join(f" {cell} |" if str(cell) else " |" for cell in cells)


def accuracy_cells(buckets: list[dict]) -> list[str]:
    """The accuracy (%) of each bucket record, one decimal."""
    return [f"{100 * b['accuracy']:.1f}" for b in buckets]


def pyplot():
    """`matplotlib.pyplot` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int = 120) -> None:
    """Lay out `fig`, write it to `path` (the format from the suffix) and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def merge_summary(path: str | Path, records: list[dict], key: tuple[str, ...], indent: int = 2) -> list[dict]:
    """Merge `records` into the JSON list at `path` (created if missing); returns the merged list.

    A record whose `key` fields equal a new record's is replaced; the others are kept (under update_json_locked's
    lock, so that runs merging into the same file at once keep each other's records)."""
    new_keys = {tuple(r[k] for k in key) for r in records}

    def merge(merged):
        if not isinstance(merged, list):
            raise ValueError(f"{path} must hold a JSON list of records, found {type(merged).__name__}")
        return [r for r in merged if tuple(r.get(k) for k in key) not in new_keys] + list(records)

    return update_json_locked(path, merge, default=[], indent=indent, end="")


def update_json_locked(path: str | Path, change, default, indent: int | None = 1, end: str = "\n"):
    """Read the JSON at `path` (`default` if missing), write `change(data)` back whole (write_json_atomic) and return
    it. The read, change and write happen under an exclusive lock on `<path>.lock` (never committed: .gitignore), so
    that two processes updating one record file keep each other's changes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = change(json.loads(path.read_text()) if path.is_file() else default)
        write_json_atomic(path, data, indent=indent, end=end)
    return data


def write_json_atomic(path: str | os.PathLike, data, indent: int | None = 1, end: str = "\n") -> None:
    """Write `data` as JSON (then `end`) to `path` whole or not at all: a temporary file in the same folder, then
    os.replace (an interrupted write leaves the previous file). Makes the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=indent)
        f.write(end)
    os.replace(tmp, path)
