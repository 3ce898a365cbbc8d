"""Pricing: hand-computed costs, the serverful baseline, and validation errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nimbus.cost.ledger import LedgerRecord
from nimbus.cost.pricing import load_pricing
from nimbus.errors import ConfigError

LAMBDA = 0.0000166667


def record(*, kind: str = "actor", memory_mb: int = 1024, gpus: float = 0.0, billed_s: float = 10.0) -> LedgerRecord:
    return LedgerRecord(invocation_id="a", attempt=1, function="f", kind=kind, worker_id="w", cold=False, init_s=0.0,
                        queued_at=0.0, start_at=0.0, end_at=billed_s, duration_s=billed_s, billed_s=billed_s,
                        cpus=1.0, gpus=gpus, memory_mb=memory_mb, outcome="ok")


def test_function_costs_by_hand() -> None:
    pricing = load_pricing()
    assert pricing.cost_usd(record=record()) == pytest.approx(10 * LAMBDA)                 # 1 GB x 10 s
    assert pricing.cost_usd(record=record(memory_mb=512, billed_s=4)) == pytest.approx(0.5 * 4 * LAMBDA)
    learner = record(kind="learner", gpus=0.25, billed_s=3600)                            # a quarter V100-hour
    assert pricing.cost_usd(record=learner) == pytest.approx(3.06 / 4)
    breakdown = pricing.cost_breakdown(records=[record(), record(), learner])
    assert breakdown == pytest.approx({"actor": 20 * LAMBDA, "learner": 0.765})
    assert pricing.total_cost_usd(records=[record(), learner]) == pytest.approx(10 * LAMBDA + 0.765)


def test_serverful_baseline() -> None:
    pricing = load_pricing()
    # one hour, 20 actor vCPUs -> 2 x c5.4xlarge, 0.5 learner GPU -> 1 x p3.2xlarge
    assert pricing.serverful_cost_usd(wall_s=3600, peak_actor_cpus=20, peak_learner_gpus=0.5) == pytest.approx(
        2 * 0.68 + 3.06)
    assert pricing.serverful_cost_usd(wall_s=1800, peak_actor_cpus=16, peak_learner_gpus=0) == pytest.approx(0.34)
    assert pricing.instances["c6a.32xlarge"].usd_per_hour == 4.896
    assert pricing.sources  # every price says where it comes from


def _write(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(load_pricing().model_dump_json())
    mutate(data)
    path = tmp_path / "pricing.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d["serverless"].update(cpu_usd_per_gb=1.0), "serverless.cpu_usd_per_gb"),
    (lambda d: d["instances"]["c5.4xlarge"].update(usd_per_hour=-1), "instances.c5.4xlarge.usd_per_hour"),
    (lambda d: d["serverless"].pop("cpu_usd_per_gb_s"), "serverless.cpu_usd_per_gb_s"),
    (lambda d: d["serverful"].update(actor_instance="m5.large"), "serverful.actor_instance"),
    (lambda d: d["serverless"].update(gpu_instance="c5.4xlarge"), "serverless.gpu_instance"),
])
def test_bad_files_name_the_key(tmp_path: Path, mutate, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_pricing(path=_write(tmp_path, mutate))


def test_round_trip_of_the_default_file_and_yaml_errors(tmp_path: Path) -> None:
    assert load_pricing(path=_write(tmp_path, lambda d: None)) == load_pricing()
    broken = tmp_path / "broken.yaml"
    broken.write_text("serverless: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_pricing(path=broken)


PROVISIONED, PROVISIONED_DURATION = 0.0000041667, 0.0000097222


def test_pre_warmed_capacity_is_priced_as_provisioned_not_free() -> None:
    """Lambda's provisioned concurrency: the provisioned time at its own rate, idle or not, and each invocation on
    it at the lower duration rate; the worker's start is a cold start's init as before."""
    import dataclasses

    pricing = load_pricing()
    stretch = dataclasses.replace(record(billed_s=100.0), outcome="prewarm", attempt=0, provisioned=True)
    assert pricing.cost_usd(record=stretch) == pytest.approx(100 * PROVISIONED)
    on_it = dataclasses.replace(record(), provisioned=True)
    assert pricing.cost_usd(record=on_it) == pytest.approx(10 * PROVISIONED_DURATION)
    start = dataclasses.replace(record(billed_s=0.5), outcome="prewarm", attempt=0, cold=True, provisioned=True)
    assert pricing.cost_usd(record=start) == pytest.approx(0.5 * LAMBDA)
    gpu_stretch = dataclasses.replace(stretch, gpus=0.25, billed_s=3600.0)
    assert pricing.cost_usd(record=gpu_stretch) == pytest.approx(3.06 / 4)   # the GPU share held all along
    assert pricing.cost_usd(record=dataclasses.replace(on_it, gpus=0.25)) == 0.0   # already in the stretch
    assert pricing.serverless.provisioned_usd_per_gb_s == PROVISIONED


def test_an_older_pricing_file_without_provisioned_rates_loads_with_lambdas(tmp_path: Path) -> None:
    from importlib import resources

    data = yaml.safe_load(resources.files("nimbus.cost").joinpath("pricing.yaml").read_text())
    for key in ("provisioned_usd_per_gb_s", "provisioned_duration_usd_per_gb_s"):
        del data["serverless"][key]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    pricing = load_pricing(path=tmp_path / "p.yaml")
    assert pricing.serverless.provisioned_duration_usd_per_gb_s == PROVISIONED_DURATION
