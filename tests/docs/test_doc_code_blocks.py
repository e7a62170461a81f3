"""Every ```python block of README.md and docs/*.md runs as printed: a user who copies one gets no NameError, no
missing import and no error from the package.

The blocks of one page run in order, each in a fresh namespace (so each must import and define what it uses), in
one temporary folder (so a block may load what an earlier block of the page saved, e.g. README's "my-hybrid"),
offline. A block that cannot run here carries a visible marker on the line before its fence:

- `<!-- not-run: REASON -->`: never run (e.g. it downloads from the Hub); listed as a skip with its reason;
- `<!-- needs: PKG, PKG -->`: run only where those packages are installed; a skip naming them elsewhere.

Every block, run or not, also passes ruff's undefined-name checks (F821-F823). For speed,
`torch.compile` compiles with the `aot_eager` backend here: it traces the same graph as inductor (dynamo,
fullgraph) and skips code generation (minutes on a CPU); tests/models/test_compile.py runs inductor itself.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import re
import shutil
import subprocess
import textwrap
import traceback

import pytest
import torch

from model_checks import ROOT

PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^( *)```python\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"^\s*<!-- (not-run|needs): (.+?) -->\s*$")


@dataclasses.dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None  # the reason, from <!-- not-run: ... -->
    needs: tuple[str, ...]  # packages, from <!-- needs: ... -->

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def page_blocks(page: str) -> list[Block]:
    """The python blocks of `page` in order, dedented (a block may sit indented in a list item), with their markers."""
    text = (ROOT / page).read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = [s for s in text[: match.start()].splitlines() if s.strip()][-1:]
        marker = MARKER.match(before[0]) if before else None
        kind, value = marker.groups() if marker else (None, "")
        needs = tuple(p.strip() for p in value.split(",")) if kind == "needs" else ()
        code = textwrap.dedent(match.group(2))
        blocks.append(Block(page, line, code, value if kind == "not-run" else None, needs))
    return blocks


ALL_BLOCKS = [block for page in PAGES for block in page_blocks(page)]


def test_the_pages_have_python_blocks_and_every_marker_is_well_formed():
    """The extraction finds the blocks (README's one and docs/models.md's three among them), and every `<!-- not-run` / `<!-- needs` comment
    in the pages sits right before a python block and gives a reason / package names (a misspelt or misplaced
    marker would silently run or skip nothing)."""
    assert sum(b.page == "README.md" for b in ALL_BLOCKS) >= 1
    assert sum(b.page == "docs/models.md" for b in ALL_BLOCKS) >= 3
    marked = sum(b.not_run is not None or bool(b.needs) for b in ALL_BLOCKS)
    written = sum(
        len(re.findall(r"<!-- (?:not-run|needs):? ", (ROOT / page).read_text(encoding="utf-8"))) for page in PAGES
    )
    assert marked == written, "a not-run / needs marker is not right before a ```python block, or has no ': '"
    assert all(b.not_run.strip() for b in ALL_BLOCKS if b.not_run is not None)


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.name for b in ALL_BLOCKS])
def test_every_block_defines_what_it_uses(block):
    """ruff's undefined-name checks (F821-F823) pass on the block alone: it imports and defines everything it
    uses, also where it is not run here (an import kept for its side effect, as README's `import hf_ssm`, is fine)."""
    if shutil.which("ruff") is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    done = subprocess.run(
        ["ruff", "check", "--isolated", "--select", "F821,F822,F823", "--stdin-filename", "block.py", "-"],
        input=block.code,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"{block.name}:\n{block.code}\n{done.stdout}"


@functools.cache
def _page_outcomes(page: str, folder) -> dict[int, str | None]:
    """Run the blocks of `page` in order in `folder` (once per page): block line -> None (ran), "skip: REASON"
    (marked) or the error it raised, as text. A block after a failed one still runs (its own outcome)."""
    outcomes = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
        torch._dynamo.reset()
        for block in page_blocks(page):
            missing = [p for p in block.needs if importlib.util.find_spec(p) is None]
            if block.not_run is not None:
                outcomes[block.line] = f"skip: not run: {block.not_run}"
            elif missing:
                outcomes[block.line] = f"skip: needs {', '.join(missing)} (pip install --no-deps {' '.join(missing)})"
            else:
                torch.manual_seed(0)
                try:
                    exec(compile(block.code, block.name, "exec"), {"__name__": "__main__"})
                    outcomes[block.line] = None
                except Exception:
                    outcomes[block.line] = traceback.format_exc()
    return outcomes


@pytest.fixture(scope="module")
def page_folders(tmp_path_factory):
    """One fresh temporary folder per page, where its blocks run."""
    return {page: tmp_path_factory.mktemp(page.replace("/", "_")) for page in PAGES}


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.name for b in ALL_BLOCKS])
def test_every_block_runs_as_printed(block, page_folders):
    """The block ran without error after the blocks before it on its page, offline, in a fresh folder; a marked
    block is listed as a skip with its reason."""
    outcome = _page_outcomes(block.page, page_folders[block.page])[block.line]
    if outcome is not None and outcome.startswith("skip: "):
        pytest.skip(f"{block.name}: {outcome.removeprefix('skip: ')}")
    assert outcome is None, f"{block.name} fails as printed:\n{block.code}\n{outcome}"
