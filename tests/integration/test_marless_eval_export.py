"""``nimbus eval`` and ``nimbus export`` of runs with several policies: a multi-agent run's agents are evaluated
together with the map they had (the same number the run's own final evaluation gave) and each policy in use
is exported, acting as eval does; a run of several policies evaluates and exports every member."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nimbus.algos.multiagent import make_multiagent_algo
from nimbus.config import parse_config
from nimbus.envs.parallel import agent_spaces, make_parallel_env
from nimbus.marless.checkpoint import load_policies
from nimbus.marless.evaluate import evaluate_marless_run
from nimbus.models.weights import load_model
from nimbus.run.loop import train
from test_cli import nimbus

pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
# the subject is eval and export of a finished run: the runs train inline (runtime/inline.py), without forks
SMALL = ["env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}", "train.max_rounds=2",
         "runtime.backend=inline"]
VALUE = ["algo.learning_starts=100", "algo.gradient_steps=5"]


@pytest.mark.parametrize(("config_name", "overrides"), [
    ("marless-ippo-spread", ["algo.num_epochs=2"]),
    ("marless-iql-spread", VALUE),
])
def test_eval_of_a_multiagent_run_is_the_runs_own_final_evaluation(make_shipped_config, config_name: str,
                                                                   overrides: list[str]) -> None:
    config = make_shipped_config(config_name, overrides=[*SMALL, *overrides, "marless.sharing=static"])
    config = config.model_copy(update={"train": config.train.model_copy(update={"eval_episodes": 3})})
    result = train(config=config)
    evaluated = evaluate_marless_run(path=result.run_dir, episodes=3, seed=config.seed + 10_000, explore=False)
    assert evaluated.mean_return == pytest.approx(result.summary.eval_return, abs=1e-9)
    sampled = evaluate_marless_run(path=result.run_dir, episodes=3, seed=config.seed + 10_000, explore=True)
    assert sampled.returns != evaluated.returns                   # greedy is not the seeded sampling
    assert evaluated.policy_versions == {"p_agent_0": 2}          # static sharing: one policy for all three
    assert set(evaluated.agent_returns) == {"agent_0", "agent_1", "agent_2"}
    assert np.mean(list(evaluated.agent_returns.values())) == pytest.approx(evaluated.mean_return)
    filmed = evaluate_marless_run(path=result.run_dir, episodes=2, seed=config.seed + 10_000, explore=False, video=True)
    assert filmed.video_dir == result.run_dir / "videos"
    assert sorted(p.name for p in filmed.video_dir.glob("*.mp4")) == ["eval-episode-0.mp4", "eval-episode-1.mp4"]
    assert filmed.returns == evaluated.returns[:2]                # recording does not change the episodes
    from moviepy import VideoFileClip
    clip = VideoFileClip(str(filmed.video_dir / "eval-episode-0.mp4"))
    assert clip.n_frames == 26 and clip.size == [700, 700]       # the reset frame + 25 steps (max_cycles)


def test_export_of_a_multiagent_run_writes_each_policy_acting_as_eval(make_shipped_config, tmp_path: Path) -> None:
    run_dir = train(config=make_shipped_config("marless-iql-spread", overrides=[*SMALL, *VALUE])).run_dir
    proc = nimbus("export", str(run_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    policies = ["p_agent_0", "p_agent_1", "p_agent_2"]
    states = load_policies(path=run_dir, policies=policies)
    config = parse_config(data=states["p_agent_0"].config)
    algo = make_multiagent_algo(config=config.algo)
    env = make_parallel_env(env_id=config.env.id, seed=0, kwargs=dict(config.env.kwargs), imports=config.env.imports)
    obs, _ = env.reset(seed=0)
    spaces = agent_spaces(env=env)
    env.close()
    for index, policy in enumerate(policies):
        agent = f"agent_{index}"
        batch = np.stack([spaces[agent].observation.sample() for _ in range(64)] + [obs[agent]]).astype(np.float32)
        script = ("import json, sys, torch; files = {'nimbus.json': ''}; "
                  "m = torch.jit.load(sys.argv[1], _extra_files=files); "
                  "x = torch.tensor(json.loads(sys.argv[2])); "
                  "print(json.dumps({'actions': m(x).tolist(), 'meta': json.loads(files['nimbus.json'])}))")
        out = subprocess.run([sys.executable, "-c", script, str(run_dir / "export" / f"{policy}.pt"),
                              json.dumps(batch.tolist())], capture_output=True, text=True, check=True, timeout=60)
        exported = json.loads(out.stdout)
        assert exported["meta"]["agents"] == [agent] and exported["meta"]["policy_version"] == 2
        model = algo.make_policy(spaces=spaces[agent])
        load_model(model=model, message=states[policy].weights)
        greedy = algo.act(model=model.eval(), obs=torch.as_tensor(batch), explore=False).actions
        np.testing.assert_array_equal(np.asarray(exported["actions"]), greedy)


def test_the_cli_evaluates_a_multiagent_run_and_refuses_one_of_its_policies_alone(make_shipped_config) -> None:
    run_dir = train(config=make_shipped_config("marless-ippo-spread", overrides=[*SMALL, "algo.num_epochs=2"])).run_dir
    proc = nimbus("eval", str(run_dir), "--episodes", "2", "--deterministic")
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = evaluate_marless_run(path=run_dir, episodes=2, seed=12345, explore=False)
    printed = " ".join(proc.stdout.split())   # rich wraps at the terminal width
    assert f"mean global return {expected.mean_return:.2f} ± {expected.std_return:.2f} over 2 episodes" in printed
    assert f"agent_2 (p_agent_2) {expected.agent_returns['agent_2']:.2f}" in printed
    for command in ("eval", "export"):
        proc = nimbus(command, str(run_dir / "policies" / "p_agent_0"))
        printed = " ".join((proc.stdout + proc.stderr).split())
        assert proc.returncode == 1 and "one policy of a multi-agent run" in printed


def test_eval_and_export_of_a_run_of_several_policies_cover_every_member(make_config) -> None:
    run_dir = train(config=make_config(overrides=[
        "train.max_rounds=1", "actors.scaling={kind: fixed, num_actors: 1}", "algo.minibatch_size=64",
        "policies=[{name: a, algo: {lr: 1.0e-3}}, {name: b, algo: {lr: 3.0e-4}}]", "runtime.backend=inline"])).run_dir
    proc = nimbus("eval", str(run_dir), "--episodes", "2", "--deterministic")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if "mean return" in line]
    assert [line.split(":")[0] for line in lines] == ["a", "b"]
    proc = nimbus("export", str(run_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all((run_dir / "policies" / name / "export" / "policy.pt").is_file() for name in ("a", "b"))
