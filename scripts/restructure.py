"""Issue 24 step 1: move modules into one folder per technique and rewrite every reference (run once, then delete).

Whole-module moves only (``git mv`` plus a rewrite of dotted names ``nimbus.a.b`` and paths ``nimbus/a/b.py``,
``tests/unit/a/test_x.py`` in code, docs and configs). Idempotent: a second run finds nothing to move or rewrite.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "nimbus"

MODULES = {   # old dotted path under nimbus → new
    "runtime.transport": "data.transport",
    "functions.weights": "models.weights",
    "functions.obsnorm": "envs.obsnorm",
    "functions.slot_state": "envs.slot_state",
    "functions.actor": "onpolicy.actor",
    "functions.learner": "onpolicy.learner",
    "functions.pipeline": "onpolicy.pipeline",
    "functions.pipeline_learner": "onpolicy.pipeline_learner",
    "functions.loader": "onpolicy.loader",
    "functions.offpolicy_actor": "offpolicy.actor",
    "functions.offpolicy_learner": "offpolicy.learner",
    "functions.gradient_algos": "stellaris.gradients",
    "functions.gradient_learner": "stellaris.learner",
    "functions.parameter": "stellaris.parameter",
    "functions.ma_actor": "marless.actor",
    "functions.ma_learner": "marless.learner",
    "functions.ma_value_learner": "marless.value_learner",
    "functions.ma_slot": "marless.slot",
    "functions.probe": "nitro.probe",
    "control.base": "types",
    "control.config": "nitro.config",
    "control.nitro": "nitro.scaler",
    "control.nitro_authors": "nitro.scaler_authors",
    "control.scaling": "nitro.baselines",
    "control.marless_scaling": "marless.scaling",
    "control.sharing": "marless.sharing",
    "control.staleness": "stellaris.rules",
    "control.pbt": "pbt.explore",
    "control.population_config": "pbt.config",
    "control.prewarm": "runtime.prewarm",
    "config.async_workflow": "offpolicy.config",
    "config.stellaris": "stellaris.config",
    "config.marless": "marless.config",
    "report.marl": "marless.report",
    "report.population": "pbt.report",
    "train.metrics": "report.metrics",
    "train.trainer": "run.loop",
    "train.build": "run.build",
    "train.checkpoint": "data.checkpoint",
    "train.ckptfile": "data.ckptfile",
    "train.evaluate": "run.evaluate",
    "train.remote": "roles.remote",
    "train.periodic_eval": "run.periodic_eval",
    "train.resume": "run.resume",
    "train.export": "run.export",
    "train.workloads": "run.workloads",
    "train.rundir": "run.rundir",
    "train.offpolicy_plan": "offpolicy.plan",
    "train.replay_checkpoint": "offpolicy.replay_checkpoint",
    "train.marl": "marless.train",
    "train.marl_checkpoint": "marless.checkpoint",
    "train.marl_evaluate": "marless.evaluate",
    "train.population": "pbt.population",
    "workflows.sync": "onpolicy.sync",
    "workflows.pipelined": "onpolicy.pipelined",
    "workflows.asynchronous": "offpolicy.workflow",
    "workflows.heard_from": "offpolicy.heard_from",
    "workflows.async_learners": "stellaris.workflow",
    "workflows.multiagent": "marless.workflow",
    "workflows.marl_learning": "marless.learning",
}
PACKAGES = {"algos.marl": "algos.multiagent"}   # whole package renames
NEW_PACKAGES = ["onpolicy", "offpolicy", "stellaris", "marless", "pbt", "nitro", "roles", "run"]
GONE_PACKAGES = ["functions", "control", "train", "workflows"]

TESTS = {   # old test file (under tests/unit) → new folder
    "functions/test_actor.py": "onpolicy", "functions/test_learner_devices.py": "onpolicy",
    "functions/test_pipeline.py": "onpolicy",
    "functions/test_ma_actor.py": "marless", "functions/test_ma_learner.py": "marless",
    "functions/test_ma_value_learner.py": "marless", "functions/marl_harness.py": "marless",
    "functions/test_obsnorm.py": "envs", "functions/test_offpolicy_functions.py": "offpolicy",
    "functions/test_probe.py": "nitro", "functions/test_stellaris_functions.py": "stellaris",
    "functions/test_stellaris_impact.py": "stellaris", "functions/test_weights.py": "models",
    "functions/function_helpers.py": ".", "functions/conftest.py": ".",
    "control/test_baseline_scalers.py": "nitro", "control/test_nitro_authors.py": "nitro",
    "control/test_nitro_scaler.py": "nitro", "control/test_scaling_config.py": "nitro",
    "control/test_marless_scaling.py": "marless", "control/test_sharing.py": "marless",
    "control/test_pbt_arithmetic.py": "pbt", "control/test_prewarm.py": "runtime",
    "control/test_staleness.py": "stellaris", "control/conftest.py": "nitro",
    "train/test_checkpoint.py": "data", "train/test_ckptfile.py": "data", "train/test_marl_video.py": "marless",
    "train/test_metrics_sink.py": "report", "train/test_offpolicy_plan.py": "offpolicy",
    "train/test_replay_file.py": "offpolicy", "train/test_periodic_eval.py": "run", "train/test_rundir.py": "run",
    "workflows/test_heard_from.py": "offpolicy", "workflows/test_inline_workflows.py": "run",
    "report/test_marl_panels.py": "marless",
}
SCOPE = ["src", "tests", "benchmarks/*.py", "scripts", "examples", "configs", "docs/*.md", "docs/benchmarks",
         "README.md", "Makefile", "pyproject.toml", ".ci"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ""}


def git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True)


def move_files() -> None:
    for package in NEW_PACKAGES:
        (SRC / package).mkdir(exist_ok=True)
        init = SRC / package / "__init__.py"
        if not init.exists():
            init.write_text("")
            git("add", str(init))
    for old, new in {**PACKAGES, **MODULES}.items():
        src = SRC / (old.replace(".", "/") + ("" if old in PACKAGES else ".py"))
        dst = SRC / (new.replace(".", "/") + ("" if old in PACKAGES else ".py"))
        if src.exists():
            git("mv", str(src), str(dst))
    for package in GONE_PACKAGES:
        init = SRC / package / "__init__.py"
        if init.exists():
            git("rm", "-q", str(init))
    for old, folder in TESTS.items():
        src = ROOT / "tests/unit" / old
        dst = ROOT / "tests/unit" / folder / Path(old).name
        if src.exists():
            dst.parent.mkdir(exist_ok=True)
            git("mv", str(src), str(dst))


def rules() -> list[tuple[re.Pattern, str]]:
    found = []
    for old, new in sorted({**PACKAGES, **MODULES}.items(), key=lambda kv: -len(kv[0])):
        found.append((re.compile(rf"\bnimbus\.{re.escape(old)}(?![\w])"), f"nimbus.{new}"))
        old_path, new_path = old.replace(".", "/"), new.replace(".", "/")
        suffix = "/" if old in PACKAGES else r"\.py"
        found.append((re.compile(rf"(?:(?<=nimbus/)|(?<![\w/.])){re.escape(old_path)}{suffix}"),
                      new_path + ("/" if old in PACKAGES else ".py")))
    for old, folder in TESTS.items():
        new = str(Path(folder) / Path(old).name).lstrip("./") if folder != "." else Path(old).name
        found.append((re.compile(rf"tests/unit/{re.escape(old)}"), f"tests/unit/{new}"))
        dotted_old = "tests.unit." + old.removesuffix(".py").replace("/", ".")
        dotted_new = "tests.unit." + str(new).removesuffix(".py").replace("/", ".")
        found.append((re.compile(rf"\b{re.escape(dotted_old)}(?![\w])"), dotted_new))
    found.append((re.compile(r"^(\s*)from function_helpers import", re.M), r"\1from tests.unit.function_helpers import"))
    return found


def files() -> list[Path]:
    found: list[Path] = []
    for pattern in SCOPE:
        for path in ROOT.glob(pattern):
            candidates = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            found += [p for p in candidates if p.suffix in SUFFIXES and "__pycache__" not in p.parts
                      and "egg-info" not in str(p) and p.name != "restructure.py"]
    return sorted(set(found))


def rewrite() -> int:
    changed = 0
    compiled = rules()
    for path in files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = text
        for pattern, replacement in compiled:
            new = pattern.sub(replacement, new)
        if new != text:
            path.write_text(new)
            changed += 1
    return changed


if __name__ == "__main__":
    move_files()
    print(f"rewrote {rewrite()} files", file=sys.stderr)
