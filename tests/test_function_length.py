"""No function of the package, the scripts or the benchmarks runs over MAX_LINES lines unless its docstring says why
(a line starting "Long because"): a long function is split into named steps, not chopped."""

from __future__ import annotations

import ast

from model_checks import ROOT

MAX_LINES = 80
CHECKED = ("hf_ssm", "scripts", "benchmarks")
REASON = "Long because"


def long_functions(source: str, max_lines: int = MAX_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method in `source` longer than `max_lines` (from its `def` line to its last
    line) whose docstring has no line starting with REASON."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            if lines > max_lines and not any(line.strip().startswith(REASON) for line in doc.splitlines()):
                found.append((node.name, lines))
    return found


def test_the_checker_finds_a_long_function_without_a_reason_only():
    """A 90-line function is reported; the same with a "Long because" line in its docstring, or under a limit of 90
    lines, is not."""
    body = "".join(f"    x{i} = {i}\n" for i in range(88))
    plain = f'def f():\n    """Doc."""\n{body}'
    reasoned = f'def f():\n    """Doc.\n\n    Long because it is a test."""\n{body}'
    assert long_functions(plain) == [("f", 90)]
    assert long_functions(reasoned) == []
    assert long_functions(plain, max_lines=90) == []


def test_no_function_over_the_limit_without_a_reason():
    """Every function in hf_ssm/, scripts/ and benchmarks/ has at most MAX_LINES lines or says why."""
    offenders = []
    for folder in CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            offenders += [f"{relative}: {name} ({lines} lines)" for name, lines in long_functions(path.read_text())]
    assert offenders == [], offenders
