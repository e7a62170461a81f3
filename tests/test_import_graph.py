"""The package's import graph, counting every import (also those inside functions): no cycle, and no import from a
lower layer to a higher one (docs/design.md §2).

Layers, lowest first: version, data, ops (the op families: references, torch scans, Triton kernels, the dispatch);
modeling, tokenization; presets, model_card; adapters; training; the package root (hf_ssm/__init__.py, which
registers the models). Scripts sit above all of them. Inside ops, the input checks are a leaf and the Triton side is
reached from the torch side only through the dispatch's lazy import.
"""

from __future__ import annotations

import ast

from model_checks import ROOT

PACKAGE = ROOT / "hf_ssm"
LAYER = {"version": 0, "data": 0, "ops": 0, "modeling": 1, "tokenization": 1, "presets": 2, "model_card": 2,
         "adapters": 3, "training": 4, "": 5}  # fmt: skip


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
    assert "hf_ssm.ops.kernels" in graph["hf_ssm.ops.dispatch"]  # a function-level import
    assert "hf_ssm.modeling.config_values" in graph["hf_ssm.modeling.mixer_registry"]  # inside a function too
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_cycles():
    """No cycle, counting imports inside functions (a lazy import that dodges a cycle is still a cycle for the
    reader). The config imports the mixer registry; the registry and the mixers read the accepted values and checks
    from config_values.py, which imports only the leaf hf_ssm.ops.checks."""
    assert cycles(import_graph()) == []


def is_triton_side(module: str) -> bool:
    """The modules that import triton: the families' kernels, what they share, the table of kernels and the kernel
    tooling."""
    parts = module.split(".")
    return parts[:2] == ["hf_ssm", "ops"] and (
        parts[-1] == "triton" or parts[2:] in (["kernels"], ["triton_common"], ["compile_check"], ["roofline"])
    )


def test_the_op_families_never_import_the_model_code():
    """No module of hf_ssm/ops (references, torch scans, kernels, dispatch) imports anything of the package outside
    hf_ssm.ops: the model imports the ops, never the other way round."""
    graph = import_graph()
    outside = sorted((a, b) for a, targets in graph.items() if a.startswith("hf_ssm.ops") for b in targets
                     if not b.startswith("hf_ssm.ops"))  # fmt: skip
    assert outside == [], outside


def test_the_checks_are_a_leaf_and_every_family_calls_them():
    """hf_ssm.ops.checks imports nothing of the package; every implementation of every family (reference, parallel
    torch, Triton) imports it."""
    graph = import_graph()
    assert graph["hf_ssm.ops.checks"] == set()
    implementations = [
        m for m in graph if m.count(".") == 3 and m.rsplit(".", 1)[1] in ("reference", "parallel", "triton")
    ]
    assert len(implementations) == 11, implementations  # pd, block, diag: all three; deer: reference and parallel
    assert all("hf_ssm.ops.checks" in graph[m] for m in implementations), implementations


def test_the_triton_side_is_reached_only_through_the_dispatch():
    """The one import from a module that does not need triton to a Triton module is the dispatch's lazy import of
    hf_ssm.ops.kernels (inside a try block, so a checkpoint's copy of the code runs on torch without them)."""
    edges = sorted((a, b) for a, targets in import_graph().items() for b in targets
                   if not is_triton_side(a) and is_triton_side(b))  # fmt: skip
    assert edges == [("hf_ssm.ops.dispatch", "hf_ssm.ops.kernels")], edges


def test_no_upward_imports():
    upward = sorted(
        (a, b) for a, targets in import_graph().items() for b in targets if LAYER[layer_of(a)] < LAYER[layer_of(b)]
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
