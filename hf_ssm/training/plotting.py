"""The figure plumbing of the training drivers' plots (loss curves, accuracy against length): matplotlib is
imported only when a plot is drawn, on the file-only Agg backend (no display on a training machine)."""

from __future__ import annotations

from pathlib import Path


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
