"""The package's import graph, counting every import (also those inside functions): no cycle, and no import from a
lower layer to a higher one except modeling -> kernels (the optional Triton scans, docs/design.md §2).

Layers, lowest first: version, data, modeling, tokenization; presets, model_card, kernels, reference (the slow
references of the scans); adapters; training; the package root (hf_ssm/__init__.py, which registers the
models). Scripts sit above all of them.
"""

from __future__ import annotations

import ast

from model_checks import ROOT

PACKAGE = ROOT / "hf_ssm"
LAYER = {"version": 0, "data": 0, "modeling": 0, "tokenization": 0, "presets": 1, "model_card": 1, "kernels": 1,
         "reference": 1, "adapters": 2, "training": 3, "": 4}  # fmt: skip
ALLOWED_UPWARD = {("modeling", "kernels")}


def modules() -> dict[str, object]:
    """Dotted module name -> path, for every module of the package (a package is its __init__.py)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its file. `from P import x` counts P (whose __init__
    runs) and P.x where that is a module; a relative import resolves against the importing module's package."""
    known = modules()
    graph = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module
                # `from P import x` runs P's __init__ too: an edge to P, and to P.x where that is a module
                targets.add(source)
                targets.update(f"{source}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return found


def layer_of(module: str) -> str:
    """The sub-package or top-level module a module belongs to ("" for the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_graph_reader_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "hf_ssm.kernels" in graph["hf_ssm.modeling.scan_dispatch"]  # a function-level import
    assert "hf_ssm.modeling.config_values" in graph["hf_ssm.modeling.mixer_registry"]  # inside a function too
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_cycles():
    """No cycle, counting imports inside functions (a lazy import that dodges a cycle is still a cycle for the
    reader). The config imports the mixer registry; the registry, the mixers and scan_dispatch read the accepted
    values and checks from config_values.py, which imports nothing of the package."""
    assert cycles(import_graph()) == []


def reachable(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(graph[v])
    return seen


def test_kernels_import_only_modeling_modules_that_lead_nowhere_back():
    """The kernels import from modeling only two leaf modules: scan_common (the input checks and mask rules shared
    with their torch twins) and pd_bank (the bank's straight-through gradients), never a torch scan; nothing those
    import reaches the kernels, scan_dispatch or a mixer, so the one upward edge modeling -> kernels (scan_dispatch's
    lazy import) closes no loop."""
    graph = import_graph()
    used = {t for name, targets in graph.items() if name.startswith("hf_ssm.kernels") for t in targets}
    below = reachable(graph, {t for t in used if not t.startswith("hf_ssm.kernels")})
    assert below == {"hf_ssm.modeling.pd_bank", "hf_ssm.modeling.scan_common"}


def test_no_upward_imports_but_modeling_to_kernels():
    upward = sorted(
        (a, b)
        for a, targets in import_graph().items()
        for b in targets
        if LAYER[layer_of(a)] < LAYER[layer_of(b)] and (layer_of(a), layer_of(b)) not in ALLOWED_UPWARD
    )
    assert upward == [], upward


WINGS = ("state_tracking", "adapter", "lm", "timeseries")


def wing_of(module: str) -> str | None:
    """The wing of hf_ssm/training a module belongs to; None for the shared core and the rest of the package."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "training" and parts[2] in WINGS else None


def test_training_wings_import_the_core_and_never_each_other():
    """hf_ssm/training is wings over a shared core (docs/design.md §2): a wing's module imports the core and its
    own wing, never another wing's, and the core imports no wing."""
    crossing = sorted(
        (a, b)
        for a, targets in import_graph().items()
        if layer_of(a) == "training"
        for b in targets
        if wing_of(b) is not None and wing_of(a) != wing_of(b)
    )
    assert crossing == [], crossing
    assert all((PACKAGE / "training" / wing / "__init__.py").is_file() for wing in WINGS)


def test_no_training_module_shares_its_file_name():
    """A module of hf_ssm/training bears a file name that no other module of the package and no script bears, so
    its name alone says which one is meant (as training/state_tracking.py beside data/state_tracking.py did not)."""
    names: dict[str, list[str]] = {}
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        if path.name != "__init__.py":
            names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in names.items() if len(paths) > 1 and any("training/" in p for p in paths)}
    assert shared == {}, shared
