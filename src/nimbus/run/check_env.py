"""``nimbus check-env ID``: what an env offers nimbus, found before any training.

In order: the env is made the way ``nimbus train`` makes it (an unknown id, a missing extra or a refused
observation space is the refusal train gives); gymnasium's ``check_env`` (single-agent) or PettingZoo's
``parallel_api_test`` (multi-agent); the spaces, and which algorithms accept them (each refusal is the one
``nimbus train`` gives with that ``algo.name``, with its fix); action masks found; whether an env slot can be
snapshotted exactly (``actors.restore_slots``, ``train.exact_resume``); and whether two resets with one seed,
followed by the same actions, give the same observations and rewards. The refusals come from the code train runs
(envs/make.py, envs/custom.py, envs/snapshot.py, marless/checks.py, the algorithms' ``make_model``), never from
a copy of it.

Example::

    findings = check_env(env_id="CartPole-v1", kwargs={}, imports=(), seed=0)
    failed = [f for f in findings if f.status == FAIL]
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from nimbus.errors import ConfigError

OK, REFUSED, FAIL, WARN = "ok", "refused", "fail", "warn"
SINGLE_AGENT_ALGOS = ("ppo", "dqn", "impala", "sac")
SEEDING_STEPS = 50   # steps compared after the two seeded resets
SNAPSHOT_KEYS = "actors.restore_slots / train.exact_resume"
API_CYCLES = 50   # PettingZoo's parallel_api_test's steps


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``status`` ok, refused (``nimbus train`` refuses this setting: ``detail`` is its
    message and fix), fail (the env breaks a contract every run needs) or warn (worth a look, trains anyway)."""

    check: str
    status: str
    detail: str


def check_env(*, env_id: str, kwargs: dict[str, Any], imports: Sequence[str], seed: int) -> list[Finding]:
    """Every check on ``env_id`` (single- or multi-agent: ``is_multiagent``), in the order the module lists."""
    from nimbus.envs.custom import import_modules

    try:
        import_modules(modules=imports, key="--import")
        multiagent = is_multiagent(env_id=env_id)
    except ConfigError as exc:
        return [Finding("make", FAIL, str(exc))]
    if multiagent:
        return check_parallel_env(env_id=env_id, kwargs=kwargs, seed=seed)
    return check_single_env(env_id=env_id, kwargs=kwargs, seed=seed)


def is_multiagent(*, env_id: str) -> bool:
    """``mpe2:<name>``, or ``pkg.module:name`` where ``name`` is not a gymnasium id the module registers."""
    if ":" not in env_id:
        return False
    module, _, name = env_id.partition(":")
    if module == "mpe2":
        return True
    from nimbus.envs.custom import registered_id
    return registered_id(env_id=env_id) not in gym.registry


def attempt(check: str, action: Callable[[], Any], *, refused: str = REFUSED) -> tuple[Finding, Any]:
    """Run ``action``: ok with its result, or ``refused`` (a ConfigError or TypeError: train's refusals) or fail."""
    try:
        return Finding(check, OK, ""), action()
    except (ConfigError, TypeError) as exc:
        return Finding(check, refused, str(exc)), None
    except Exception as exc:  # noqa: BLE001 - anything else the env raised is the finding itself
        return Finding(check, FAIL, f"{type(exc).__name__}: {exc}"), None


# ---- single-agent ------------------------------------------------------------------------------------

def check_single_env(*, env_id: str, kwargs: dict[str, Any], seed: int) -> list[Finding]:
    from nimbus.envs.make import make_env

    made, env = attempt("make (as nimbus train)", lambda: make_env(env_id=env_id, seed=seed, kwargs=kwargs),
                        refused=FAIL)
    findings = [made] + gymnasium_api(env_id=env_id, kwargs=kwargs)
    if env is None:
        return findings
    try:
        findings += single_agent_algos(env=env, env_id=env_id)
        findings.append(Finding("action masks", OK, "none: nimbus's single-agent algorithms sample every action"))
        findings.append(single_agent_snapshot(env=env, env_id=env_id))
    finally:
        env.close()
    findings.append(seeding(make=lambda: make_env(env_id=env_id, seed=seed, kwargs=kwargs), seed=seed,
                            run=_single_agent_run))
    return findings


def gymnasium_api(*, env_id: str, kwargs: dict[str, Any]) -> list[Finding]:
    """gymnasium's own ``check_env`` on the raw env: its failure, or each warning it gives."""
    from gymnasium.utils.env_checker import check_env as gymnasium_check

    from nimbus.envs.custom import registered_id

    try:
        raw = gym.make(registered_id(env_id=env_id), disable_env_checker=True, **kwargs).unwrapped
    except Exception as exc:  # noqa: BLE001 - reported: gymnasium cannot make it either
        return [Finding("gymnasium check_env", FAIL, f"gymnasium.make failed: {type(exc).__name__}: {exc}")]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gymnasium_check(raw, skip_render_check=True, skip_close_check=True)
    except Exception as exc:  # noqa: BLE001 - the checker's verdict
        return [Finding("gymnasium check_env", FAIL, f"{type(exc).__name__}: {exc}")]
    finally:
        raw.close()
    notes = sorted({re.sub(r"\x1b\[[0-9;]*m", "", str(w.message)) for w in caught})   # gymnasium colours them
    return [Finding("gymnasium check_env", WARN if notes else OK, "; ".join(notes))]


def single_agent_algos(*, env: gym.Env, env_id: str) -> list[Finding]:
    """Each single-agent algorithm builds its network for the env's spaces, as ``nimbus train`` does."""
    from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
    from nimbus.envs.spaces import EnvSpaces

    spaces = EnvSpaces(observation=env.observation_space, action=env.action_space)
    findings = [Finding("spaces", OK, f"observation {env.observation_space}, action {env.action_space}")]

    def model_of(name: str) -> Any:
        return make_algorithm(config=ALGO_CONFIGS[name]()).make_model(spaces=spaces)

    results = {name: attempt(f"algo.name: {name}", partial(model_of, name))[0] for name in SINGLE_AGENT_ALGOS}
    accepted = [name for name, found in results.items() if found.status == OK]
    fix = f"; with this env use algo.name: {' or '.join(accepted)}" if accepted else \
        "; no algorithm accepts these spaces: adapt the action space with a gymnasium.ActionWrapper in env.wrappers"
    for found in results.values():
        findings.append(found if found.status == OK else Finding(found.check, found.status, found.detail + fix))
    return findings


def single_agent_snapshot(*, env: gym.Env, env_id: str) -> Finding:
    from nimbus.envs.snapshot import check_snapshot, require_snapshot

    found, _ = attempt("env slot snapshot", lambda: require_snapshot(check=lambda: check_snapshot(env=env),
                                                                     env_id=env_id, key=SNAPSHOT_KEYS))
    return found if found.status != OK else Finding(found.check, OK, "restored exactly: actors.restore_slots and "
                                                                     "train.exact_resume can keep its episodes")


def _single_agent_run(*, env: gym.Env, seed: int) -> list[np.ndarray]:
    """Observations and rewards after ``reset(seed)`` and SEEDING_STEPS actions drawn from a space seeded alike."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    trace = [np.asarray(obs)]
    for _ in range(SEEDING_STEPS):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        trace += [np.asarray(obs), np.asarray(reward)]
        if terminated or truncated:
            break
    return trace


# ---- multi-agent (a PettingZoo Parallel env) ------------------------------------------------------

def check_parallel_env(*, env_id: str, kwargs: dict[str, Any], seed: int) -> list[Finding]:
    from nimbus.envs.parallel import make_parallel_env

    def make() -> Any:
        return make_parallel_env(env_id=env_id, seed=seed, kwargs=dict(kwargs))

    made, env = attempt("make (as nimbus train)", make, refused=FAIL)
    findings = [made, pettingzoo_api(env_id=env_id, kwargs=kwargs)]
    if env is None:
        return findings
    try:
        env.reset(seed=seed)
        findings += multiagent_algos(env=env, env_id=env_id)
        findings.append(masks(env=env))
        findings.append(parallel_snapshot(env=env, env_id=env_id, seed=seed))
    finally:
        env.close()
    findings.append(seeding(make=make, seed=seed, run=_parallel_run))
    return findings


def pettingzoo_api(*, env_id: str, kwargs: dict[str, Any]) -> Finding:
    from pettingzoo.test import parallel_api_test

    from nimbus.envs.parallel import build_raw_env

    found, raw = attempt("pettingzoo parallel_api_test", lambda: build_raw_env(env_id=env_id, kwargs=dict(kwargs)),
                         refused=FAIL)
    if raw is None:
        return found
    try:
        with contextlib.redirect_stdout(io.StringIO()):   # it prints "Passed Parallel API test"
            parallel_api_test(raw, num_cycles=API_CYCLES)
    except Exception as exc:  # noqa: BLE001 - the test's verdict
        return Finding(found.check, FAIL, f"{type(exc).__name__}: {exc}")
    finally:
        raw.close()
    return found


def multiagent_algos(*, env: Any, env_id: str) -> list[Finding]:
    """Each multi-agent algorithm's refusal of some agent's spaces (the message train gives: agent and fix), and
    QMIX's need of the env's global state."""
    from nimbus.algos.multiagent import MULTIAGENT_ALGO_CONFIGS
    from nimbus.envs.parallel import agent_spaces
    from nimbus.marless.checks import check_agent_spaces, check_full_sharing
    from nimbus.marless.parts import require_env_state
    from nimbus.marless.sharing import space_signature

    spaces = agent_spaces(env=env)
    shown = ", ".join(f"{agent}: observation {s.observation}, action {s.action}" for agent, s in sorted(spaces.items()))
    findings = [Finding("spaces", OK, shown)]
    for name in MULTIAGENT_ALGO_CONFIGS:
        def check(name: str = name) -> None:
            check_agent_spaces(spaces=spaces, algo_name=name, env_id=env_id)
            if name == "qmix":
                require_env_state(env=env, env_id=env_id)
        findings.append(attempt(f"algo.name: {name}", check)[0])
    findings.append(attempt("marless.sharing: full", lambda: check_full_sharing(
        compatible={agent: space_signature(spaces=s) for agent, s in spaces.items()}))[0])
    return findings


def masks(*, env: Any) -> Finding:
    """The agents whose legal actions the env gives (PettingZoo's ``action_mask``), read at the first reset."""
    agents = sorted(env.mask_agents or ())
    if not agents:
        return Finding("action masks", OK, "none found (no 'action_mask' in observations or infos)")
    return Finding("action masks", OK, f"found for {', '.join(agents)}: nimbus's actors sample only legal actions")


def parallel_snapshot(*, env: Any, env_id: str, seed: int) -> Finding:
    from nimbus.envs.parallel_snapshot import check_parallel_snapshot
    from nimbus.envs.snapshot import require_snapshot

    found, _ = attempt("env slot snapshot", lambda: require_snapshot(
        check=lambda: check_parallel_snapshot(env=env, seed=seed), env_id=env_id, key=SNAPSHOT_KEYS))
    if found.status == OK:
        return Finding(found.check, OK, "restored exactly: actors.restore_slots can keep its episodes")
    return found if found.status != FAIL else Finding(found.check, WARN, found.detail)


def _parallel_run(*, env: Any, seed: int) -> list[np.ndarray]:
    """Each agent's observations and rewards after ``reset(seed)`` and SEEDING_STEPS joint actions drawn from
    action spaces seeded alike."""
    observations, _ = env.reset(seed=seed)
    for i, agent in enumerate(env.possible_agents):
        env.action_space(agent).seed(seed + i)
    trace = [np.asarray(observations[a]) for a in sorted(observations)]
    for _ in range(SEEDING_STEPS):
        if not env.agents:
            break
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        observations, rewards, _, _, _ = env.step(actions)
        trace += [np.asarray(observations[a]) for a in sorted(observations)]
        trace += [np.asarray(rewards[a]) for a in sorted(rewards)]
    return trace


# ---- shared --------------------------------------------------------------------------------------------

def seeding(*, make: Callable[[], Any], seed: int, run: Callable[..., list[np.ndarray]]) -> Finding:
    """Two envs reset with ``seed`` and given the same actions: the same observations and rewards, bit for bit
    (what P16's same-seed, same-run promise needs from the env)."""
    traces = []
    for _ in range(2):
        env = make()
        try:
            traces.append(run(env=env, seed=seed))
        except Exception as exc:  # noqa: BLE001 - the env's error is the finding
            return Finding("seeding", FAIL, f"{type(exc).__name__}: {exc}")
        finally:
            env.close()
    first, second = traces
    mismatch = [i for i, (a, b) in enumerate(zip(first, second)) if not np.array_equal(a, b, equal_nan=True)]
    if not mismatch and len(first) == len(second):
        return Finding("seeding", OK, f"two resets with seed {seed}, then the same actions: identical "
                                      f"({len(first)} arrays compared)")
    at = mismatch[0] if mismatch else min(len(first), len(second))
    return Finding("seeding", FAIL, f"two resets with seed {seed}, then the same actions, differ at array {at}: "
                                    "the env draws from a generator reset(seed=...) does not seed (use self.np_random, "
                                    "seeded by super().reset(seed=seed)); runs with one seed will not repeat")


# ---- the command ---------------------------------------------------------------------------------------

_STYLE = {OK: "green", REFUSED: "yellow", WARN: "yellow", FAIL: "bold red"}


def add_check_env_command(sub: Any) -> None:
    """``nimbus check-env ID [--kwargs YAML] [--import MODULE] [--seed N]`` on the CLI's subparsers."""
    p = sub.add_parser("check-env", help="check an env before training: gymnasium / PettingZoo API, spaces and "
                       "the algorithms that accept them, action masks, snapshots, seeding; each refusal with its fix")
    p.add_argument("env_id", metavar="ID", help="a gymnasium id, module:EnvId, mpe2:<env> or pkg.module:factory")
    p.add_argument("--kwargs", default="{}", help="env.kwargs as a YAML mapping, e.g. '{N: 2, max_cycles: 25}'")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="a module that registers the id (env.imports); repeatable")
    p.add_argument("--seed", type=int, default=0, help="the seed of the resets compared (default 0)")
    p.set_defaults(func=check_env_command)


def check_env_command(args: Any) -> int:
    """Print every finding; exit 1 when a check failed or no algorithm accepts the env, else 0 (2: bad --kwargs)."""
    from rich.console import Console
    from rich.markup import escape

    from nimbus.config.yaml_loader import parse_yaml

    kwargs = parse_yaml(text=args.kwargs, source="--kwargs")
    if not isinstance(kwargs, dict):
        raise ConfigError(f"--kwargs: expected a YAML mapping such as '{{N: 2}}', got {args.kwargs!r}")
    findings = check_env(env_id=args.env_id, kwargs=kwargs, imports=tuple(args.imports), seed=args.seed)
    out = Console()
    for found in findings:
        detail = f": {escape(found.detail)}" if found.detail else ""
        out.print(f"[{_STYLE[found.status]}]{found.status:>7}[/] {escape(found.check)}{detail}", highlight=False)
    accepted = [f.check.split(": ", 1)[1] for f in findings if f.check.startswith("algo.name: ") and f.status == OK]
    failed = [f.check for f in findings if f.status == FAIL]
    if failed or not accepted:
        out.print(f"{args.env_id}: not trainable as is ({', '.join(failed) or 'no algorithm accepts its spaces'})")
        return 1
    out.print(f"{args.env_id}: trainable with algo.name {', '.join(accepted)}")
    return 0
