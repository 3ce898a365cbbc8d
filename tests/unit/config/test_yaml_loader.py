"""Config YAML is read with bounds (issue 28.7): a 411-byte alias bomb in env.kwargs (9⁹ strings once
expanded) passed validation and grew past 1.9 GB; now it is refused at load time, fast and small."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nimbus.config import load_config
from nimbus.config.yaml_loader import parse_yaml
from nimbus.errors import ConfigError
from nimbus.schema.bounds import MAX_CONFIG_BYTES

REPO = Path(__file__).resolve().parents[3]
PPO = REPO / "configs" / "ppo-cartpole.yaml"

BOMB = textwrap.dedent("""\
    algo: {name: ppo}
    env:
      kwargs:
        a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
        b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
        c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
        d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
        e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
        f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
        g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
        h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
        i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    """)

LOAD_UNDER_1_GIB = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from pathlib import Path
from nimbus.config import load_config
from nimbus.errors import ConfigError
def peak_rss_kib():
    status = Path("/proc/self/status").read_text().split()
    return int(status[status.index("VmHWM:") + 1])
Path("/proc/self/clear_refs").write_text("5")   # the peak from here on (fork copies the parent's into it)
started, before = time.perf_counter(), peak_rss_kib()
try:
    load_config(path=Path(sys.argv[1]))
    print("accepted")
except ConfigError as exc:
    print("refused", time.perf_counter() - started, peak_rss_kib() - before, exc)
"""


def test_an_alias_bomb_is_refused_fast_in_little_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB.encode()) < 600
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", LOAD_UNDER_1_GIB, str(path)], capture_output=True, text=True,
                         env=env, timeout=120).stdout.split(maxsplit=3)
    assert out[0] == "refused", out
    seconds, grown_kib, message = float(out[1]), int(out[2]), out[3]
    assert seconds < 5 and grown_kib < 50 * 1024, (seconds, grown_kib)   # and the process has 1 GiB at most
    assert "bomb.yaml: expands to more than 100,000 values" in message


@pytest.mark.parametrize("text,message", [
    (BOMB, "expands to more than"),
    ("algo: {name: ppo}\nx: " + "[" * 50_000 + "]" * 50_000 + "\n", "nested too deep"),   # was a RecursionError (rc 1)
], ids=["alias-bomb", "deep-nesting"])
def test_the_cli_exits_2(tmp_path: Path, text: str, message: str, run_cli) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, said = run_cli("train", str(path))
    assert code == 2 and message in said, said[-2000:]


def test_small_anchors_and_merge_keys_still_work() -> None:
    data = parse_yaml(text="base: &base {lr: 0.001, gamma: 0.9}\nalgo: {<<: *base, name: ppo}\n", source="t")
    assert data["algo"] == {"lr": 0.001, "gamma": 0.9, "name": "ppo"}


@pytest.mark.parametrize("text,problem", [
    ("a: &a [1, *a]\n", "recursive"),
    ("a: " + "[" * 150 + "]" * 150 + "\n", "nested"),
    ("a: [1, 2\n", "not valid YAML"),
])
def test_recursive_deep_and_broken_yaml_are_config_errors(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_yaml(text=text, source="t.yaml")


def test_an_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("algo: {name: ppo}\n#" + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match="bytes of YAML; a config is at most"):
        load_config(path=path)


def test_exponent_floats_are_floats_as_in_yaml_1_2() -> None:
    """PyYAML (YAML 1.1) reads 1e-3 as a string; the strict models would refuse it, so the loader reads it as 1.2
    does."""
    config = load_config(path=PPO, overrides=["algo.lr=1e-3", "algo.max_grad_norm=1E+1", "train.target_return=5e2"])
    assert (config.algo.lr, config.algo.max_grad_norm, config.train.target_return) == (1e-3, 10.0, 500.0)
    with pytest.raises(ConfigError, match=r"train\.total_env_steps: Input should be a valid integer"):
        load_config(path=PPO, overrides=["train.total_env_steps=1e5"])
