"""train.overlap's config rules: the plain onpolicy workflow's option, refused where another part moves the learner."""

from __future__ import annotations

import pytest

from nimbus.config import parse_config
from nimbus.errors import ConfigError


def _data(**train: object) -> dict:
    return {"name": "t", "algo": {"name": "ppo", "minibatch_size": 64}, "train": {"overlap": True, **train}}


def test_off_by_default_and_accepted_for_sync_ppo() -> None:
    assert parse_config(data={"name": "t", "algo": {"name": "ppo"}}).train.overlap is False
    assert parse_config(data=_data()).train.overlap is True


@pytest.mark.parametrize(("data", "message"), [
    (_data(exact_resume=True), "cannot continue bitwise"),
    ({**_data(), "pipeline": {"minibatch": True}}, "pick one"),
    ({**_data(workflow="offpolicy"), "algo": {"name": "dqn"}}, "train.overlap overlaps the onpolicy workflow"),
])
def test_refused_where_it_cannot_hold(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(data=data)
