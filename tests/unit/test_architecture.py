"""The import graph follows the layers (docs/architecture.md), so each layer reads without the ones above it.

Every module under src/nimbus is parsed with ``ast``: module-level and lazy (in-function) imports count, and so does
the package ``__init__`` each import runs on its way (``packages_entered``); imports under ``if TYPE_CHECKING:`` are
exempt from the layer check. Checked: (a) no module imports a higher layer than its own (``LAYERS``, low to high),
(b) no import circle between modules (Tarjan's strongly connected components), among the imports that run and, apart
from ``TYPE_ONLY_CIRCLES``, with the TYPE_CHECKING ones too, (c) core.py imports no nimbus module, not even for type
checking, (d) no private name (``_x``) imported from another module, (e) ``import nimbus.config`` loads neither
torch nor any algorithm nor anything above the config layer. A known violation may be listed in ``ALLOWED_*`` with
what removes it (all four lists are empty): the test fails on any new violation, and on an entry that no longer
occurs (delete it: the lists only shrink).
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

import nimbus

PACKAGE = Path(nimbus.__file__).resolve().parent

# Low to high: a module may import its own layer and lower ones. "" is the nimbus package itself; core.py (the
# protocols) and types.py (the plain data they name) import nothing above them. schema < config: every config section
# is built on schema/, and config/ imports the sections that live in technique and algorithm folders. data < cost
# (cost.ledger writes through data.jsonl, nothing in data imports cost) and analysis < runtime (hessian imports only
# liveness; runtime.builtin runs it) follow the code. roles/ (what every technique's functions share), report/ and
# policy/ (one policy's plumbing, which every workflow over one System builds on) sit below the technique folders;
# run/ (the run loop) above them.
TECHNIQUES = ("nitro", "onpolicy", "offpolicy", "stellaris", "marless", "pbt")
LAYERS: list[tuple[str, ...]] = [
    ("", "core", "types", "errors", "liveness"), ("schema",), ("config",), ("data",), ("cost",), ("analysis",),
    ("runtime",), ("envs",), ("models",), ("algos",), ("roles",), ("report",), ("policy",), TECHNIQUES, ("run",),
    ("sweep",), ("bench",), ("cli",),
]
# Technique folders share one layer; one imports another only along these edges (docs/architecture.md), each of them
# used (an edge no import takes is deleted): the on-policy, off-policy and multi-agent learners call Nitro's probe,
# Stellaris's rounds hold the on-policy ActorRound, PBT's members are onpolicy workflows. What every workflow over one
# System shares (its build, lifecycle and checkpoints) is policy/, a layer below, not a technique's.
TECHNIQUE_EDGES: dict[str, set[str]] = {
    "nitro": set(), "onpolicy": {"nitro"}, "offpolicy": {"nitro"}, "stellaris": {"onpolicy"}, "pbt": {"onpolicy"},
    "marless": {"nitro"},
}
# Config sections that live beside their technique belong to the config layer, since reading a config must load
# none of the technique's code: every ``nimbus.<...>.config`` module, plus these.
CONFIG_MODULES: set[str] = set()

ALLOWED_UPWARD: dict[str, str] = {   # "importer -> imported": why, and what removes it
}
ALLOWED_TECHNIQUE: dict[str, str] = {   # "importer -> imported" between technique folders, off TECHNIQUE_EDGES
}
ALLOWED_CIRCLES: dict[frozenset[str], str] = {   # every module of one strongly connected component
}
ALLOWED_PRIVATE: dict[str, str] = {   # "importer -> module:name"
}
# Circles only type annotations close (each edge back is a TYPE_CHECKING import): nothing runs them, and each names
# the object it is a part of.
TYPE_ONLY_CIRCLES: dict[frozenset[str], str] = {
    frozenset({"nimbus.config.root", "nimbus.config.rules"}):
        "the rules NimbusConfig's validators run are typed with the NimbusConfig they check",
    frozenset({"nimbus.runtime.simulated", "nimbus.runtime.simulated_waits"}):
        "the futures and event queue a SimulatedRuntime hands out are typed with the runtime they advance",
}


def module_files() -> dict[str, tuple[Path, bool]]:
    """Module name → (file, is a package's ``__init__``) for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["nimbus", *path.relative_to(PACKAGE).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imports(*, tree: ast.AST, exempt: bool = False):
    """(node, under TYPE_CHECKING) for every import, at any depth; an ``if TYPE_CHECKING:`` body is exempt."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, exempt
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for node in child.body:
                yield from _imports(tree=ast.Module(body=[node], type_ignores=[]), exempt=True)
            for node in child.orelse:
                yield from _imports(tree=ast.Module(body=[node], type_ignores=[]), exempt=exempt)
        else:
            yield from _imports(tree=child, exempt=exempt)


@functools.lru_cache(maxsize=1)
def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]], set[str]]:
    """(edges, TYPE_CHECKING-only edges, private names as ``importer -> module:name``) between nimbus modules."""
    modules = module_files()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    typing_only: dict[str, set[str]] = {name: set() for name in modules}
    private: set[str] = set()
    for name, (path, is_package) in modules.items():
        for node, exempt in _imports(tree=ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:   # relative: from the importer's package up (level - 1) packages
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
                private |= {f"{name} -> {base}:{a.name}" for a in node.names if base.startswith("nimbus")
                            and a.name.startswith("_") and not a.name.startswith("__") and base != name}
            for target in targets:
                if target in modules and target != name:
                    (typing_only if exempt else edges)[name].add(target)
    return edges, typing_only, private


def through_doors(*, edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """``edges`` and, beside each, the packages whose ``__init__`` the import runs on the way (packages_entered)."""
    return {importer: targets | {package for target in targets
                                 for package in packages_entered(importer=importer, target=target)}
            for importer, targets in edges.items()}


def packages_entered(*, importer: str, target: str) -> list[str]:
    """The packages whose ``__init__`` Python runs before ``target`` when ``importer`` imports it: every package
    above the target but those above the importer (already running). A technique's config section importing
    ``nimbus.config.<module>`` would run ``nimbus/config/__init__.py``, which imports every section, that one
    included, while it is half-initialised: a circle through a package's door that module edges alone do not show."""
    parts = target.split(".")
    return [package for package in (".".join(parts[:i]) for i in range(1, len(parts)))
            if not importer.startswith(package + ".")]


def layer_of(module: str) -> int:
    if module.rsplit(".", 1)[-1] == "config" and module != "nimbus.config" or module in CONFIG_MODULES:
        module = "nimbus.config"
    package = module.split(".")[1] if "." in module else ""
    found = [i for i, layer in enumerate(LAYERS) if package in layer]
    assert found, f"package nimbus.{package} is in no layer: add it to LAYERS in {Path(__file__).name}"
    return found[0]


def upward_imports() -> set[str]:
    edges, _, _ = import_graph()
    return {f"{a} -> {b}" for a, targets in edges.items() for b in targets if layer_of(b) > layer_of(a)}


def circles(*, edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = {stack.pop()}
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _unexpected(*, found: set, allowed: dict) -> tuple[list, list]:
    return sorted(found - allowed.keys(), key=str), sorted(allowed.keys() - found, key=str)


def test_no_module_imports_a_higher_layer() -> None:
    new, gone = _unexpected(found=upward_imports(), allowed=ALLOWED_UPWARD)
    assert new == [], f"imports up the layers (LAYERS in {Path(__file__).name}): {new}"
    assert gone == [], f"no longer imported: delete them from ALLOWED_UPWARD: {gone}"


def imports_between_techniques() -> set[tuple[str, str]]:
    """(importer, imported) for every import from one technique folder into another, config sections aside."""
    edges, _, _ = import_graph()
    folder = {m: m.split(".")[1] for m in edges if m.count(".") >= 2}
    return {(a, b) for a, targets in edges.items() for b in targets
            if folder.get(a) in TECHNIQUES and folder.get(b) in TECHNIQUES and folder[a] != folder[b]
            and not b.endswith(".config")}


def technique_imports() -> set[str]:
    """Imports between two technique folders (their config sections aside) that TECHNIQUE_EDGES does not allow."""
    return {f"{a} -> {b}" for a, b in imports_between_techniques()
            if b.split(".")[1] not in TECHNIQUE_EDGES[a.split(".")[1]]}


def test_technique_folders_import_one_another_only_along_the_allowed_edges() -> None:
    new, gone = _unexpected(found=technique_imports(), allowed=ALLOWED_TECHNIQUE)
    assert new == [], f"imports between technique folders off TECHNIQUE_EDGES: {new}"
    assert gone == [], f"no longer imported: delete them from ALLOWED_TECHNIQUE: {gone}"


def test_every_allowed_technique_edge_is_taken_by_an_import() -> None:
    """TECHNIQUE_EDGES says which technique builds on which; an edge no module takes any more says too much."""
    taken = {(a.split(".")[1], b.split(".")[1]) for a, b in imports_between_techniques()}
    unused = sorted(f"{a} -> {b}" for a, targets in TECHNIQUE_EDGES.items() for b in targets if (a, b) not in taken)
    assert unused == [], f"no module imports along these edges: delete them from TECHNIQUE_EDGES: {unused}"


def test_no_import_circle_between_modules() -> None:
    edges, _, _ = import_graph()
    new, gone = _unexpected(found=circles(edges=through_doors(edges=edges)), allowed=ALLOWED_CIRCLES)
    assert new == [], f"import circles: {[sorted(c) for c in new]}"
    assert gone == [], f"circles no longer there: delete them from ALLOWED_CIRCLES: {[sorted(c) for c in gone]}"


def test_no_circle_through_type_checking_imports_either() -> None:
    """A circle closed by a TYPE_CHECKING import still ties its modules into one piece that reads only as a whole (a
    learner.py naming the model of the algorithm.py that imports it)."""
    edges, typing_only, _ = import_graph()
    both = {name: edges[name] | typing_only[name] for name in edges}
    new, gone = _unexpected(found=circles(edges=through_doors(edges=both)), allowed=TYPE_ONLY_CIRCLES)
    assert new == [], f"import circles, TYPE_CHECKING imports counted: {[sorted(c) for c in new]}"
    assert gone == [], f"no longer there: delete them from TYPE_ONLY_CIRCLES: {[sorted(c) for c in gone]}"


def test_core_imports_no_nimbus_module() -> None:
    """core.py is the lowest layer's leaf: the protocols every layer implements name the types of those layers as
    strings (``core.TYPE_HOMES``), so no import, TYPE_CHECKING ones included, leads from it back into the layers."""
    edges, typing_only, _ = import_graph()
    assert (edges["nimbus.core"], typing_only["nimbus.core"]) == (set(), set())


def test_no_private_name_is_imported_from_another_module() -> None:
    _, _, private = import_graph()
    new, gone = _unexpected(found=private, allowed=ALLOWED_PRIVATE)
    assert new == [], f"private names imported from another module (make them public): {new}"
    assert gone == [], f"no longer imported: delete them from ALLOWED_PRIVATE: {gone}"


def test_every_allowed_entry_says_what_removes_it() -> None:
    reasons = [*ALLOWED_UPWARD.values(), *ALLOWED_TECHNIQUE.values(), *ALLOWED_CIRCLES.values(),
               *ALLOWED_PRIVATE.values()]
    assert [r for r in reasons if "removed by:" not in r] == []


def test_the_checks_see_lazy_imports_type_checking_ones_and_package_doors() -> None:
    edges, typing_only, _ = import_graph()
    assert "nimbus.report.render" in edges["nimbus.run.loop"]              # lazy, inside SingleRun.conclude()
    assert "nimbus.config.root" in typing_only["nimbus.config.rules"]      # under TYPE_CHECKING only
    assert "nimbus.config.root" not in edges["nimbus.config.rules"]
    assert circles(edges={"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}
    assert packages_entered(importer="nimbus.stellaris.config", target="nimbus.config.sections") == ["nimbus.config"]
    assert packages_entered(importer="nimbus.config.root", target="nimbus.config.sections") == []   # already running
    doors = through_doors(edges={"nimbus.x.config": {"nimbus.y.base"}, "nimbus.y": {"nimbus.y.root"},
                                 "nimbus.y.root": {"nimbus.x.config"}})
    assert circles(edges=doors) == {frozenset({"nimbus.x.config", "nimbus.y", "nimbus.y.root"})}


def _loaded_by(statement: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env).stdout.split()


def test_importing_config_loads_neither_torch_nor_any_algorithm_nor_anything_above_config() -> None:
    """Reading a config is data only; an algorithm's section is imported when a config names it."""
    loaded = _loaded_by("import nimbus.config")
    assert "nimbus.config" in loaded
    heavy = [m for m in loaded if m == "torch" or m.startswith(("torch.", "nimbus.algos"))]
    assert heavy == [], f"import nimbus.config loaded {len(heavy)} of them: {heavy[:5]}"
    packages = {m.rsplit(".", 1)[0] for m in loaded}   # a package's __init__ loads with its modules
    above = [m for m in loaded if m.startswith("nimbus") and m not in packages
             and layer_of(m) > layer_of("nimbus.config")]
    assert above == []


def test_validating_every_shipped_config_imports_no_torch() -> None:
    """`nimbus train bad.yaml` exits 2 before torch loads (seconds on a small machine), whatever algorithm it names:
    each algorithm's section module is torch-free (the multi-agent ones too: algos/multiagent/config.py)."""
    configs = str(PACKAGE.parents[1] / "configs")
    code = ("import sys, pathlib; from nimbus.config import load_config\n"
            f"[load_config(path=p, overrides=[]) for p in sorted(pathlib.Path({configs!r}).glob('*.yaml'))]\n"
            "print(' '.join(m for m in sys.modules if m == 'torch' or m.startswith('torch.')) or 'none')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split()[:5] == ["none"]


def test_the_config_finds_every_registered_algorithm_by_name() -> None:
    from nimbus.algos.registry import ALGO_CONFIGS
    from nimbus.config import parse_config
    from nimbus.config.algo import ALGO_SECTIONS, algo_section

    assert {name: algo_section(name=name) for name in ALGO_SECTIONS} == ALGO_CONFIGS
    for name, cls in ALGO_CONFIGS.items():
        workflow = {"dqn": "offpolicy", "sac": "offpolicy", "impala": "offpolicy"}.get(name, "marless" if name in (
            "ippo", "mappo", "iql", "vdn", "qmix") else "onpolicy")
        config = parse_config(data={"algo": {"name": name}, "train": {"workflow": workflow},
                                    "actors": {"fragment_steps": 50 if name == "impala" else 128}})
        assert type(config.algo) is cls
