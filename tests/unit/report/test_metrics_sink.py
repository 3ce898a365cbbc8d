"""TensorBoard tags of a round row's extras, as the run loop logs them (RunTrackers, right after metrics.jsonl):
controller signals under control/, evaluation and staleness under their own names (the report and a user's
TensorBoard find eval/return_mean where it is documented). MetricsSink writes metrics.jsonl only."""

import json
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nimbus.config.sections import OutputConfig
from nimbus.report.metrics import MetricsSink
from nimbus.report.trackers import RunTrackers
from nimbus.types import RoundMetrics


def test_extras_are_tagged_by_their_prefix(tmp_path: Path) -> None:
    sink = MetricsSink(run_dir=tmp_path, status_line=False)
    trackers = RunTrackers.open(output=OutputConfig(loggers=("tensorboard",)), run_dir=tmp_path, config={})
    row = RoundMetrics(round=0, env_steps=2500, episodes=3, return_mean=20.0, return_min=10.0, return_max=30.0,
                       num_actors=2, num_learners=1, policy_version=4, sampling_s=0.1, transfer_s=0.0,
                       learning_s=0.1, round_s=0.2, wall_s=0.2, cost_usd=0.0,
                       extras={"eval/return_mean": 487.5, "staleness/mean": 1.5, "hessian_ratio": 0.25})
    sink.write(row=row, runtime={})
    trackers.log(row=row, runtime={})
    sink.close()
    trackers.close(failed=False)
    tags = EventAccumulator(str(tmp_path)).Reload().Tags()["scalars"]
    assert {"eval/return_mean", "staleness/mean", "control/hessian_ratio"} <= set(tags)
    assert not {"control/eval/return_mean", "control/staleness/mean"} & set(tags)
    (written,) = (json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines())
    assert written["extras"]["eval/return_mean"] == 487.5


def test_the_sink_writes_no_event_file(tmp_path: Path) -> None:
    """TensorBoard is a tracker like the others (output.loggers): the sink alone leaves only metrics.jsonl."""
    sink = MetricsSink(run_dir=tmp_path, status_line=False)
    sink.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
