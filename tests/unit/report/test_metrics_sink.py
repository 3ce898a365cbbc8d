"""TensorBoard tags of a round row's extras: controller signals under control/, evaluation and staleness
under their own names (the report and a user's TensorBoard find eval/return_mean where it is documented)."""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nimbus.report.metrics import MetricsSink
from nimbus.types import RoundMetrics


def test_extras_are_tagged_by_their_prefix(tmp_path: Path) -> None:
    sink = MetricsSink(run_dir=tmp_path, tensorboard=True, status_line=False)
    row = RoundMetrics(round=0, env_steps=2500, episodes=3, return_mean=20.0, return_min=10.0, return_max=30.0,
                       num_actors=2, num_learners=1, policy_version=4, sampling_s=0.1, transfer_s=0.0,
                       learning_s=0.1, round_s=0.2, wall_s=0.2, cost_usd=0.0,
                       extras={"eval/return_mean": 487.5, "staleness/mean": 1.5, "hessian_ratio": 0.25})
    sink.write(row=row, runtime={})
    sink.close()
    tags = EventAccumulator(str(tmp_path)).Reload().Tags()["scalars"]
    assert {"eval/return_mean", "staleness/mean", "control/hessian_ratio"} <= set(tags)
    assert not {"control/eval/return_mean", "control/staleness/mean"} & set(tags)
