"""Small UEA / UCR `.ts` files written by the time-series tests (tests/data/, tests/training/), and the mark that
skips a test where aeon's shipped BasicMotions files are missing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from hf_ssm.data.timeseries import aeon_data_dir

needs_aeon = pytest.mark.skipif(
    aeon_data_dir() is None or not (aeon_data_dir() / "BasicMotions").is_dir(), reason="aeon (BasicMotions) missing"
)


def write_ts(folder: Path, name: str, header_classes: str, rows: list[tuple[list[list[float]], str]], missing=False):
    """Write a small multivariate .ts file; rows are (dims, label) with dims[c] the values of channel c."""
    lines = [
        f"@problemName {name.split('_')[0]}",
        f"@missing {'true' if missing else 'false'}",
        f"@dimensions {len(rows[0][0])}",
        "@equalLength false",
        f"@classLabel true {header_classes}",
        "@data",
    ]
    for dims, label in rows:
        text = ":".join(",".join("?" if isinstance(v, float) and math.isnan(v) else repr(v) for v in d) for d in dims)
        lines.append(f"{text}:{label}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.ts").write_text("\n".join(lines) + "\n")


def random_rows(count: int, channels: int, generator, offset: float = 0.0, scale: float = 1.0, classes="ab"):
    rows = []
    for i in range(count):
        length = int(torch.randint(3, 9, (1,), generator=generator))
        values = torch.randn(channels, length, generator=generator) * scale + offset
        rows.append(([[round(float(v), 4) for v in ch] for ch in values], classes[i % len(classes)]))
    return rows
