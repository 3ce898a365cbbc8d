"""P11, second half: leaving this machine takes authentication, or an explicit allow_insecure: true."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.config import parse_config
from nimbus.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
PPO = {"algo": {"name": "ppo"}}


def _redis(url: str, **store) -> dict:
    return {**PPO, "store": {"backend": "redis", "url": url, **store}}


def _ray(address: str, **runtime) -> dict:
    return {**PPO, "runtime": {"backend": "ray", "address": address, **runtime}, "store": {"backend": "ray"}}


@pytest.mark.parametrize("url", ["redis://10.0.0.5:6379/0", "redis://redis.internal:6379/0", "redis://[2001:db8::1]:6379",
                                 "redis://nimbus@10.0.0.5:6379/0"])
def test_a_redis_url_off_this_machine_without_password_or_tls_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match=r"store\.url .* neither a password nor TLS.*store\.allow_insecure: true"):
        parse_config(data=_redis(url))


@pytest.mark.parametrize("data", [
    _redis("redis://127.0.0.1:6379/0"), _redis("redis://localhost:6379/0"), _redis("redis://[::1]:6379/0"),
    _redis("redis://127.3.2.1:6379/0"), _redis("unix:///run/redis.sock"),
    _redis("rediss://10.0.0.5:6380/0"),                                  # TLS
    _redis("redis://10.0.0.5:6379/0", password_env="NIMBUS_REDIS_PASSWORD"),
    _redis("redis://10.0.0.5:6379/0", password="s3cret"),
    _redis("redis://:s3cret@10.0.0.5:6379/0"),
    _redis("redis://10.0.0.5:6379/0", allow_insecure=True),
], ids=["ipv4-loopback", "localhost", "ipv6-loopback", "127/8", "unix", "tls", "password_env", "password",
        "url-password", "allow_insecure"])
def test_loopback_tls_a_password_or_an_explicit_opt_out_is_accepted(data: dict) -> None:
    assert parse_config(data=data).store.url == data["store"]["url"]


@pytest.mark.parametrize("address", ["10.0.0.1:6379", "auto", "ray://head.internal:10001"])
def test_a_ray_address_without_token_auth_is_refused(address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(ConfigError, match=r"runtime\.address .* without authentication.*runtime\.allow_insecure: true"):
        parse_config(data=_ray(address))


@pytest.mark.parametrize("address", ["10.0.0.1:6379", "auto"])
def test_a_ray_address_with_token_auth_or_an_explicit_opt_out_is_accepted(address: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert parse_config(data=_ray(address, allow_insecure=True)).runtime.address == address
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert parse_config(data=_ray(address)).runtime.address == address


@pytest.mark.parametrize("address", ["local", "127.0.0.1:6379", "localhost:6379"])
def test_a_ray_on_this_machine_needs_no_token(address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert parse_config(data=_ray(address)).runtime.address == address


@pytest.mark.parametrize("overrides, key", [
    (["store.backend=redis", "store.url=redis://10.0.0.5:6379/0"], "store.url"),
    (["runtime.backend=ray", "runtime.address=10.0.0.1:6379", "store.backend=ray"], "runtime.address"),
])
def test_the_cli_exits_2_naming_the_key_before_anything_starts(overrides: list[str], key: str, tmp_path: Path,
                                                               run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    argv = ["train", str(REPO / "configs" / "ppo-cartpole.yaml"), "--set", f"output.root_dir={tmp_path / 'runs'}"]
    for override in overrides:
        argv += ["--set", override]
    code, said = run_cli(*argv)
    assert code == 2, said[-2000:]
    assert key in said and "allow_insecure: true" in said
    assert not (tmp_path / "runs").exists()  # refused before a run directory (or anything else) was made
