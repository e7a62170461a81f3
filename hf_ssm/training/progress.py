"""The progress bar every training loop shows (tqdm), on the local main process only."""

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
        mininterval=TERMINAL_INTERVAL_S if sys.stderr.isatty() else LOG_INTERVAL_S,
    )
