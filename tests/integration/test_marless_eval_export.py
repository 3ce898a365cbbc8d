"""``nimbus eval`` and ``nimbus export`` of runs with several policies: a multi-agent run's agents are evaluated
together with the map they had (the same number the run's own final evaluation gave) and each policy in use
is exported, acting as eval does; a run of several policies evaluates and exports every member. The commands run
through nimbus.cli.main in this process (``run_cli``; the console script itself: test_cli.py)."""

from __future__ import annotations

import json
import re
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
    pytest.importorskip("moviepy", reason="the video extra (pip install nimbus-rl[video])")
    filmed = evaluate_marless_run(path=result.run_dir, episodes=2, seed=config.seed + 10_000, explore=False, video=True)
    assert filmed.video_dir == result.run_dir / "videos"
    assert sorted(p.name for p in filmed.video_dir.glob("*.mp4")) == ["eval-episode-0.mp4", "eval-episode-1.mp4"]
    assert filmed.returns == evaluated.returns[:2]                # recording does not change the episodes
    from moviepy import VideoFileClip
    clip = VideoFileClip(str(filmed.video_dir / "eval-episode-0.mp4"))
    assert clip.n_frames == 26 and clip.size == [700, 700]       # the reset frame + 25 steps (max_cycles)


def test_export_of_a_multiagent_run_writes_each_policy_acting_as_eval(make_shipped_config, tmp_path: Path,
                                                                      run_cli) -> None:
    run_dir = train(config=make_shipped_config("marless-iql-spread", overrides=[*SMALL, *VALUE])).run_dir
    code, said = run_cli("export", str(run_dir))
    assert code == 0, said[-3000:]
    policies = ["p_agent_0", "p_agent_1", "p_agent_2"]
    states = load_policies(path=run_dir, policies=policies)
    config = parse_config(data=states["p_agent_0"].config)
    algo = make_multiagent_algo(config=config.algo)
    env = make_parallel_env(env_id=config.env.id, seed=0, kwargs=dict(config.env.kwargs), imports=config.env.imports)
    obs, _ = env.reset(seed=0)
    spaces = agent_spaces(env=env)
    env.close()
    batches = {policy: np.stack([spaces[f"agent_{index}"].observation.sample() for _ in range(64)]
                                + [obs[f"agent_{index}"]]).astype(np.float32) for index, policy in enumerate(policies)}
    # one fresh interpreter (torch only) loads every exported file
    script = ("import json, sys, torch\nout = {}\n"
              "for path, batch in json.loads(sys.argv[1]).items():\n"
              "    files = {'nimbus.json': ''}\n"
              "    m = torch.jit.load(path, _extra_files=files)\n"
              "    out[path] = {'actions': m(torch.tensor(batch)).tolist(), 'meta': json.loads(files['nimbus.json'])}\n"
              "print(json.dumps(out))")
    files = {policy: str(run_dir / "export" / f"{policy}.pt") for policy in policies}
    out = subprocess.run([sys.executable, "-c", script, json.dumps({files[p]: batches[p].tolist() for p in policies})],
                         capture_output=True, text=True, check=True, timeout=120)
    outputs = json.loads(out.stdout)
    for index, policy in enumerate(policies):
        agent, batch, exported = f"agent_{index}", batches[policy], outputs[files[policy]]
        assert exported["meta"]["agents"] == [agent] and exported["meta"]["policy_version"] == 2
        model = algo.make_policy(spaces=spaces[agent])
        load_model(model=model, message=states[policy].weights)
        greedy = algo.act(model=model.eval(), obs=torch.as_tensor(batch), explore=False).actions
        np.testing.assert_array_equal(np.asarray(exported["actions"]), greedy)


def test_the_cli_evaluates_a_multiagent_run_and_refuses_one_of_its_policies_alone(make_shipped_config,
                                                                                   run_cli) -> None:
    run_dir = train(config=make_shipped_config("marless-ippo-spread", overrides=[*SMALL, "algo.num_epochs=2"])).run_dir
    code, printed = run_cli("eval", str(run_dir), "--episodes", "2", "--deterministic")
    assert code == 0, printed[-3000:]
    expected = evaluate_marless_run(path=run_dir, episodes=2, seed=12345, explore=False)
    assert f"mean global return {expected.mean_return:.2f} ± {expected.std_return:.2f} over 2 episodes" in printed
    assert f"agent_2 (p_agent_2) {expected.agent_returns['agent_2']:.2f}" in printed
    for command in ("eval", "export"):
        code, printed = run_cli(command, str(run_dir / "policies" / "p_agent_0"))
        assert code == 1 and "one policy of a multi-agent run" in printed, printed


def test_eval_and_export_of_a_run_of_several_policies_cover_every_member(make_config, run_cli) -> None:
    run_dir = train(config=make_config(overrides=[
        "train.max_rounds=1", "actors.scaling={kind: fixed, num_actors: 1}", "algo.minibatch_size=64",
        "policies=[{name: a, algo: {lr: 1.0e-3}}, {name: b, algo: {lr: 3.0e-4}}]", "runtime.backend=inline"])).run_dir
    code, said = run_cli("eval", str(run_dir), "--episodes", "2", "--deterministic")
    assert code == 0, said[-3000:]
    assert re.findall(r"(\w+): policy_version \d+: mean return", said) == ["a", "b"], said
    code, said = run_cli("export", str(run_dir))
    assert code == 0, said[-3000:]
    assert all((run_dir / "policies" / name / "export" / "policy.pt").is_file() for name in ("a", "b"))
