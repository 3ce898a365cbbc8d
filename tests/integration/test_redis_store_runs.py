"""Whole runs with ``store.backend: redis`` against a real redis-server (P11, P12): every failure ends
in a clear outcome — never a hang — and nothing is counted twice."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import redis

from nimbus.cli import main as cli_main
from nimbus.data.checkpoint import load_checkpoint
from nimbus.errors import StoreFull, StoreUnavailable
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.runtime.faults import FAULTS_ENV, read_counter
from support import only_run_dir

pytestmark = pytest.mark.redis
ROWS_PER_ROUND = 2 * 4 * 32


def redis_overrides(url: str, *extra: str) -> list[str]:
    return ["store.backend=redis", f"store.url={url}", "store.max_retries=2", "store.backoff_base_s=0.02",
            "store.backoff_cap_s=0.2", "store.timeout_s=1.0", *extra]


def test_a_run_on_redis_keeps_the_key_space_bounded_and_leaves_nothing(make_config, redis_server) -> None:
    server = redis_server()
    client = redis.Redis.from_url(server.url)
    peak = {"keys": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak["keys"] = max(peak["keys"], sum(1 for _ in client.scan_iter("nimbus:*:v:*")))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    result = train(config=make_config(overrides=redis_overrides(server.url, "train.max_rounds=8")))
    done.set()
    sampler.join()
    assert result.summary.rounds == 8 and result.summary.env_steps == 8 * ROWS_PER_ROUND
    assert 0 < peak["keys"] <= 2 * 3  # weights + optimizer state of at most keep_versions + 1 versions
    assert client.keys("*") == []  # the owner removed every key of the run


def test_a_learner_killed_after_its_put_to_redis_is_retried(make_config, redis_server, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """P1 on Redis: round 0's learner writes v+1 to Redis and is SIGKILLed; its retry re-writes v+1 as the
    same invocation, the run completes, and the writers' marks go with their values."""
    server = redis_server()
    counter = tmp_path / "counter"
    monkeypatch.setenv(FAULTS_ENV, json.dumps({"learner.published": {"action": "kill", "counter_path": str(counter),
                                                                     "times": 1}}))
    result = train(config=make_config(overrides=redis_overrides(server.url, "train.max_rounds=3")))
    assert read_counter(path=counter) == 1
    assert result.summary.rounds == 3 and result.summary.policy_version == 3 and result.summary.retries == 1
    assert redis.Redis.from_url(server.url).keys("*") == []


def test_redis_killed_mid_run_stops_cleanly_with_a_final_checkpoint(make_config, redis_server,
                                                                    tmp_path: Path) -> None:
    server = redis_server()
    config = make_config(overrides=redis_overrides(server.url, "train.max_rounds=500"))

    def kill_after_three_rounds() -> None:
        metrics = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = [p for p in tmp_path.iterdir() if p.is_dir()]
            metrics = runs[0] / "metrics.jsonl" if runs else None
            if metrics is not None and metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
                server.kill()
                return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_after_three_rounds, daemon=True)
    killer.start()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="stopped cleanly after round"):
        train(config=config)
    assert time.monotonic() - started < 90
    run_dir = only_run_dir(tmp_path)
    rows = read_metrics(path=run_dir / "metrics.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    checkpoint = load_checkpoint(path=run_dir)
    assert summary["stopped_by"] == "store_unavailable" and summary["rounds"] == len(rows) >= 3
    assert checkpoint.round == len(rows) and checkpoint.policy_version == len(rows)
    assert checkpoint.env_steps == rows[-1]["env_steps"] == len(rows) * ROWS_PER_ROUND  # nothing counted twice
    ledger = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    finished = [r for r in ledger if r["outcome"] == "ok" and r["function"] == "actor"]
    assert len(finished) >= 2 * len(rows)


def test_unreachable_redis_fails_fast_naming_the_url_or_falls_back(make_config) -> None:
    url = "redis://127.0.0.1:1/0"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="127.0.0.1:1"):
        train(config=make_config(overrides=redis_overrides(url, "train.max_rounds=2")))
    assert time.monotonic() - started < 20
    result = train(config=make_config(overrides=redis_overrides(url, "train.max_rounds=2", "store.fallback=shm")))
    assert result.summary.rounds == 2


def test_wrong_password_exits_1_with_a_clear_message(make_config, redis_server, tmp_path: Path, capsys) -> None:
    server = redis_server(password="right")
    config_path = tmp_path / "run.yaml"
    config = make_config(overrides=redis_overrides(server.url, "train.max_rounds=2"))
    config_path.write_text(json.dumps({**config.model_dump(mode="json"),  # YAML is a superset of JSON
                                       "store": {**config.store.model_dump(mode="json"), "password": "hunter2"}}))
    assert cli_main(["train", str(config_path)]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "store.password" in err and server.url in err and "hunter2" not in err


def test_full_redis_stops_the_run_clearly_instead_of_hanging(make_config, redis_server, tmp_path: Path) -> None:
    """maxmemory + noeviction with room for a few versions: writes wait (back-pressure) up to
    store.full_wait_s, then the run stops with a final checkpoint and a clear error."""
    server = redis_server()
    client = redis.Redis.from_url(server.url)
    # room for a few dozen versions: connection and query buffers of the run's clients take a few hundred KB too
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 2_000_000)
    client.config_set("maxmemory-policy", "noeviction")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="is full .*maxmemory") as info:
        train(config=make_config(overrides=redis_overrides(server.url, "train.max_rounds=500",
                                                           "train.keep_checkpoints=500", "store.keep_versions=50",
                                                           "store.full_wait_s=1.0")))
    assert time.monotonic() - started < 60
    assert "stopped cleanly after round" in str(info.value)
    run_dir = only_run_dir(tmp_path)
    assert load_checkpoint(path=run_dir).round == json.loads((run_dir / "summary.json").read_text())["rounds"] > 0


def test_redis_full_before_the_first_write_is_a_clear_error(make_config, redis_server) -> None:
    server = redis_server(maxmemory="1kb")
    with pytest.raises(StoreFull, match="maxmemory"):
        train(config=make_config(overrides=redis_overrides(server.url, "store.full_wait_s=0.5")))
