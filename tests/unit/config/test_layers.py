"""The import graph follows the layers (DESIGN.md §4, issue 11): config is data, functions never import the
driver side, workflows never import the trainer that runs them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import nimbus

PACKAGE = Path(nimbus.__file__).resolve().parent


def nimbus_imports(path: Path) -> set[str]:
    """Every ``nimbus.*`` module a source file imports, at any depth (lazy imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nimbus"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("nimbus"))
    return found


def _under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_importing_config_loads_no_runtime_train_function_or_workflow_code() -> None:
    code = "import sys, nimbus.config; print(' '.join(m for m in sys.modules if m.startswith('nimbus')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    upward = [m for m in loaded if _under(m, "nimbus.train", "nimbus.runtime", "nimbus.functions", "nimbus.workflows",
                                          "nimbus.cli", "nimbus.data")]
    assert "nimbus.config" in loaded and upward == []


def test_functions_import_neither_workflows_nor_the_run() -> None:
    for path in sorted((PACKAGE / "functions").glob("*.py")):
        upward = {m for m in nimbus_imports(path) if _under(m, "nimbus.workflows", "nimbus.train", "nimbus.cli")}
        assert upward == set(), f"{path.name} imports {upward}"


def test_workflows_do_not_import_the_trainer_and_config_rules_import_only_data() -> None:
    for path in sorted((PACKAGE / "workflows").glob("*.py")):
        assert not {m for m in nimbus_imports(path) if _under(m, "nimbus.train.trainer", "nimbus.cli")}, path.name
    rules = set().union(*(nimbus_imports(path) for path in (PACKAGE / "config").glob("*.py")))
    assert {m for m in rules if _under(m, "nimbus.train", "nimbus.runtime", "nimbus.functions")} == set()


def test_importing_config_loads_neither_torch_nor_any_algorithm() -> None:
    """Issue 24: reading a config is data only; an algorithm's section is imported when a config names it."""
    code = "import sys, nimbus.config; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "nimbus.config" in loaded
    heavy = [m for m in loaded if _under(m, "torch", "nimbus.algos", "nimbus.control.nitro", "nimbus.analysis")]
    assert heavy == [], f"import nimbus.config loaded {len(heavy)} of them: {heavy[:5]}"


def test_the_config_finds_every_registered_algorithm_by_name() -> None:
    from nimbus.algos.registry import ALGO_CONFIGS
    from nimbus.config import parse_config
    from nimbus.config.algo import ALGO_SECTIONS, algo_section

    assert {name: algo_section(name=name) for name in ALGO_SECTIONS} == ALGO_CONFIGS
    for name, cls in ALGO_CONFIGS.items():
        workflow = {"dqn": "async", "sac": "async", "impala": "async"}.get(name, "multiagent" if name in (
            "ippo", "mappo", "iql", "vdn") else "sync")
        config = parse_config(data={"algo": {"name": name}, "train": {"workflow": workflow},
                                    "actors": {"fragment_steps": 50 if name == "impala" else 128}})
        assert type(config.algo) is cls
