"""The layering, read from the source: no import circle inside `eppo_envs` or `eppo_train`, no module under
`eppo_envs/tools/` or `eppo_envs/core/` importing a task package, and the envs never importing the learner.

Every `import` counts, the deferred ones inside functions too (a deferred import hides a circle, it does not remove
it); only imports under `if TYPE_CHECKING:` are left out, as they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("eppo_envs", "eppo_train")
LAYERS = ("core", "tools")  # eppo_envs/<layer>: shared by every task, so it may know none of them


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The project modules `path` imports (a `from pkg import name` counts `pkg.name` when that is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = module.split(".") if is_pkg else module.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                found.add(base)
                found.update(f"{base}.{a.name}" for a in child.names)
            visit(child)

    visit(tree)
    out = set()
    for name in found:
        while name and name not in known:  # `a.b.c` where only `a.b` is a module: the import loads `a.b`
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = {(_module_name(p)): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    known = set(files)
    # importing `a.b.c` runs `a/__init__` and `a/b/__init__` too, but those edges are the package's own
    # business: the test follows the modules named in import statements
    return {m: _imports(p, m, known) for m, p in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def _is_package_init(module: str, graph: dict[str, set[str]]) -> bool:
    return any(other.startswith(module + ".") for other in graph)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(graph, package):
    # a package's __init__ re-exporting its submodules, which import each other through the package name, is
    # the package itself: circles are counted between modules that are not each other's package
    inner = {m: {d for d in deps if d.startswith(package + ".") and not m.startswith(d + ".")
                 and not d.startswith(m + ".")}
             for m, deps in graph.items() if m.startswith(package + ".")}
    cycles = _cycles(inner)
    assert not cycles, "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_shared_layers_import_no_task(graph):
    # everything in eppo_envs that is not a shared layer (the tasks, and the remote/integration packages on top)
    tasks = {m.split(".")[1] for m in graph if m.startswith("eppo_envs.") and m.count(".") >= 1
             and _is_package_init(".".join(m.split(".")[:2]), graph)} - set(LAYERS)
    assert {"math", "searchqa", "webshop"} <= tasks  # the walk sees the task packages
    bad = sorted(f"{m} -> {d}" for m, deps in graph.items()
                 if m.split(".")[:2] in (["eppo_envs", layer] for layer in LAYERS)
                 for d in deps if d.startswith("eppo_envs.") and d.split(".")[1] in tasks)
    assert not bad, "a shared layer imports a task package: " + ", ".join(bad)


def test_envs_never_import_the_learner(graph):
    bad = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.startswith("eppo_envs")
                 for d in deps if d.split(".")[0] == "eppo_train")
    assert not bad, ", ".join(bad)


def test_the_walk_sees_deferred_imports(graph):
    # the trainer imports the SFT stage nowhere, but the CLI does so inside a function: the walk must see it
    assert "eppo_train.sft" in graph["eppo_train.cli"]
    assert "eppo_train.tasks" in graph["eppo_train.sft"] and "eppo_train.trainer" not in graph["eppo_train.sft"]


def test_the_config_imports_no_module_that_acts_on_it(graph):
    # the config owns its choices (dtypes, backends, pacing variants, ...): the modules that act on them import
    # config.py, never the reverse; config.py imports only its builder and, to check names, the two registries
    # (losses, estimators), which themselves import nothing that acts on the config, and the task registry's
    # import_tasks, which imports `env.imports` (they may register a loss or an estimator) before the check
    registries = {"eppo_train.losses", "eppo_train.advantages"}
    project = {d for d in graph["eppo_train.config"] if d.split(".")[0] in PACKAGES}
    assert project <= {"eppo_train.typed", "eppo_envs.core.registry"} | registries, sorted(project)
    for registry in registries:
        assert {d for d in graph[registry] if d.split(".")[0] in PACKAGES} <= {"eppo_train.typed", "eppo_train.records"}
