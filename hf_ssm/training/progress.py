"""The progress bars (tqdm) of every training loop, on the local main process only, and of long evaluations."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm

# Refresh often on a terminal; in a log file (not a tty) a line every 10 s keeps the log short.
TERMINAL_INTERVAL_S, LOG_INTERVAL_S = 0.5, 10.0


def training_progress(accelerator, desc: str, total: int, initial: int = 0, iterable=None) -> tqdm:
    """A tqdm bar over `iterable` (or updated by hand), starting at `initial` of `total` (a resumed run)."""
    return tqdm(
        iterable,
        initial=initial,
        total=total,
        desc=desc,
        disable=not accelerator.is_local_main_process,
        mininterval=_refresh_interval(),
    )


def evaluation_progress(iterable, desc: str, total: int, enabled: bool = True) -> tqdm:
    """A tqdm bar over the batches of one evaluation: a test set of long stories can take tens of minutes."""
    return tqdm(iterable, total=total, desc=desc, disable=not enabled, mininterval=_refresh_interval())


def _refresh_interval() -> float:
    return TERMINAL_INTERVAL_S if sys.stderr.isatty() else LOG_INTERVAL_S
