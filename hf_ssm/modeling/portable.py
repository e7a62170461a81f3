"""The export step of save_pretrained: the model's torch code, flattened into the checkpoint folder, so that the
checkpoint loads with `trust_remote_code=True` where hf_ssm is not installed (docs/design.md §2).

transformers' save_pretrained copies the module file of a remote-code class and, recursively, the files that file
imports with single-dot relative imports (`from .x import y`) from its own folder; its remote-code loader reads that
one flat folder back, and refuses a file that imports a package it cannot find. The model's code lives in two
folders, hf_ssm/modeling and hf_ssm/ops (the torch side of the op families), and the modeling files import the ops
by absolute imports (`from hf_ssm.ops.pd import ...`), which transformers neither follows nor could load without
hf_ssm. So after transformers' copy this step writes the whole import closure of the saved class's module into the
folder as flat files, every import of a module of the package rewritten to a single-dot relative one:

    hf_ssm.modeling.<name>       -> <name>.py            (the names transformers gives the modeling files)
    hf_ssm.ops.<a>[.<b>]         -> ops_<a>[_<b>].py     e.g. hf_ssm.ops.pd.parallel -> ops_pd_parallel.py
                                                         (a package is its __init__.py: hf_ssm.ops.pd -> ops_pd.py)

Followed and rewritten: every `from <module of the package> import names`, absolute or relative, at the top of a
file or inside a function. Left as written and not followed: the imports inside a `try` statement (as transformers'
loader leaves them unchecked), which must have a fallback: the scan dispatch's lazy import of the Triton kernels
(hf_ssm.ops.kernels), so a checkpoint loaded where hf_ssm is installed still reaches them and, where it is not,
runs on the torch scans. Neither the Triton files nor the plain references (hf_ssm.ops.<family>.reference, except
DEER's, which the model runs) travel: nothing the model imports outside a `try` imports them. Any other form of
import of the package (`import hf_ssm.x`, or `from hf_ssm.ops import pd` naming a module) is refused with a
ValueError, and so is a written folder whose files would still import hf_ssm where transformers' loader checks.

A class loaded as remote code (its module outside hf_ssm, already flat) needs no export: transformers' own copy
follows the rewritten relative imports. This file imports only the standard library (it travels too).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

PACKAGE = "hf_ssm"
# The package's folders whose modules travel, and the prefix of their flat names.
_FLAT_PREFIX = {f"{PACKAGE}.modeling": "", f"{PACKAGE}.ops": "ops_"}
# `from <module> import` at the start of an import statement (the part this step rewrites).
_FROM = re.compile(r"from\s+\.*[\w.]*\s+import\b")
# transformers' reading of a file's relative imports (dynamic_module_utils.get_relative_imports).
_RELATIVE = (
    re.compile(r"^\s*import\s+\.(\S+)\s*$", re.MULTILINE),
    re.compile(r"^\s*from\s+\.(\S+)\s+import", re.MULTILINE),
)


def flat_name(module: str) -> str:
    """The file name (without .py) of a module of the package in the flat checkpoint folder."""
    for folder, prefix in _FLAT_PREFIX.items():
        if module == folder and prefix:
            return prefix.rstrip("_")
        if module.startswith(folder + "."):
            return prefix + module[len(folder) + 1 :].replace(".", "_")
    raise ValueError(f"{module} is not part of the portable model code (hf_ssm.modeling, hf_ssm.ops)")


def _spec(module: str):
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"cannot find the source of {module}")
    return spec


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _package_imports(tree: ast.AST, module: str, is_package: bool):
    """(import node, absolute module it names) of every import of the package outside a `try` statement."""
    here = module if is_package else module.rpartition(".")[0]
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Try, ast.TryStar)):
            continue  # optional imports, with a fallback: left as written
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE]
            if names:
                raise ValueError(f"{module}: `import {names[0]}`: import from a module of the package instead")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == PACKAGE:
                yield node, target
        stack.extend(ast.iter_child_nodes(node))


def portable_sources(root: str) -> dict[str, str]:
    """{flat file name: rewritten source} of `root` (a module of hf_ssm.modeling) and every module of the package
    it imports, directly or not, outside a `try` statement."""
    sources: dict[str, str] = {}
    owners: dict[str, str] = {}
    todo = [root]
    while todo:
        module = todo.pop()
        name = flat_name(module)
        if name in sources:
            if owners[name] != module:
                raise ValueError(f"{owners[name]} and {module} would both be written as {name}.py")
            continue
        spec = _spec(module)
        text = Path(spec.origin).read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        for node, target in _package_imports(ast.parse(text), module, spec.submodule_search_locations is not None):
            imported = [f"{target}.{alias.name}" for alias in node.names]
            if any(_is_module(name) for name in imported):
                raise ValueError(f"{module}: `from {target} import` names a module; import from that module instead")
            line = lines[node.lineno - 1]
            found = _FROM.match(line, node.col_offset)
            if found is None:
                raise ValueError(f"{module}, line {node.lineno}: cannot read the import statement {line.strip()!r}")
            lines[node.lineno - 1] = f"{line[: found.start()]}from .{flat_name(target)} import{line[found.end() :]}"
            todo.append(target)
        sources[name], owners[name] = "".join(lines), module
    return sources


def _imports_the_package(text: str) -> bool:
    """Whether transformers' loader would ask for hf_ssm to read this file: an absolute import of it outside a `try`
    statement (the loader skips those)."""
    stack = [ast.parse(text)]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Try, ast.TryStar)):
            continue
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == PACKAGE for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == PACKAGE:
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def check_portable_folder(folder, module_file: str) -> list[str]:
    """The files transformers' loader reads for `module_file` in `folder` (it and, recursively, its relative
    imports); a ValueError if one is missing or still imports hf_ssm outside a `try` statement."""
    folder, seen, todo = Path(folder), [], [module_file]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = folder / f"{name}.py"
        if not path.is_file():
            raise ValueError(f"{folder}: {name}.py is imported by the model's code but was not written")
        text = path.read_text(encoding="utf-8")
        if _imports_the_package(text):
            raise ValueError(f"{path} imports {PACKAGE}: the checkpoint would not load where it is not installed")
        seen.append(name)
        todo.extend(found for pattern in _RELATIVE for found in pattern.findall(text))
    return seen


def write_portable_code(root: str, folder) -> list[Path]:
    """Write `root`'s module and its closure flat into `folder` (the export step of save_pretrained; see the module
    docstring) and check the result as transformers' loader will read it. Returns the written paths; none where
    `root` is not a module of the package (a class loaded as remote code, already flat)."""
    if not root.startswith(f"{PACKAGE}.modeling."):
        return []
    folder = Path(folder)
    written = []
    for name, text in sorted(portable_sources(root).items()):
        path = folder / f"{name}.py"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    check_portable_folder(folder, flat_name(root))
    return written


__all__ = ["check_portable_folder", "flat_name", "portable_sources", "write_portable_code"]
