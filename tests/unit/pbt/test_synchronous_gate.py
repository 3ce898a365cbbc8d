"""Synchronous PBT's wait (pbt/population.py as run/members.py's Gate), over stand-in members: who waits, when a
generation is ranked, and that a member which stops never leaves the others waiting."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from nimbus.config import load_config
from nimbus.data.codec import Message
from nimbus.models.weights import optim_key, weights_key
from nimbus.pbt.population import Population
from nimbus.types import RoundMetrics

REPO = Path(__file__).resolve().parents[3]


class DictStore:
    def __init__(self) -> None:
        self.messages: dict[str, Message] = {}

    def get(self, *, key: str) -> Message:
        return self.messages[key]

    def put(self, *, key: str, message: Message) -> None:
        self.messages[key] = message


class Member:
    """What the population reads of a member's workflow: progress, config, store; ``switch_version`` recorded."""

    def __init__(self, *, name: str, config, store: DictStore) -> None:
        self.name, self.store = name, store
        self.system = SimpleNamespace(config=config, store=store)
        self.progress = SimpleNamespace(rounds=0, recent_returns=[], policy_version=0)
        self.switched: list[int] = []

    def end_round(self, *, mean_return: float) -> RoundMetrics:
        """A round ends: a new learner version in the Store, its returns, its row."""
        self.progress.rounds += 1
        self.progress.policy_version += 1
        self.progress.recent_returns = [mean_return]
        for key in (weights_key(policy=self.name, version=self.progress.policy_version),
                    optim_key(policy=self.name, version=self.progress.policy_version)):
            self.store.put(key=key, message=Message(header={"policy_version": self.progress.policy_version},
                                                    arrays={"w": np.full(3, mean_return, np.float32)}))
        return RoundMetrics(round=self.progress.rounds - 1, env_steps=128 * self.progress.rounds, episodes=1,
                            return_mean=mean_return, return_min=mean_return, return_max=mean_return, num_actors=1,
                            num_learners=1, policy_version=self.progress.policy_version, sampling_s=0.0,
                            transfer_s=0.0, learning_s=0.0, round_s=0.0, wall_s=0.0, cost_usd=0.0, losses={})

    def switch_version(self, *, version: int) -> None:
        self.switched.append(version)
        self.progress.policy_version = version


@pytest.fixture
def population(tmp_path: Path):
    config = load_config(path=REPO / "configs" / "ppo-cartpole.yaml", overrides=[
        "pbt={members: 3, interval_rounds: 1, fraction: 0.34, synchronous: true, "
        "hyperparameters: {lr: {low: 1.0e-5, high: 1.0e-2, log: true}}}"])
    store = DictStore()
    controller = Population(config=config, run_dir=tmp_path, resume_from=None)
    members = [Member(name=plan.name, config=plan.config, store=store) for plan in controller.plans]
    controller.begin(workflows=members)
    for i, member in enumerate(members):
        controller.attach(i, member)
    yield controller, members
    controller.close()


def end(controller: Population, members: list[Member], i: int, mean_return: float) -> None:
    controller.after_round(i, members[i].end_round(mean_return=mean_return))


def test_members_wait_for_the_generation_then_the_bottom_one_copies_the_top_one(population) -> None:
    controller, members = population
    end(controller, members, 2, 1.0)          # worst, first to end round 0: waits
    end(controller, members, 0, 9.0)          # best: waits
    assert controller.holds(2) and controller.holds(0) and controller.take_released() == []
    end(controller, members, 1, 5.0)          # the last: the generation is ranked, the two others go on
    assert not any(controller.holds(i) for i in range(3))
    assert sorted(controller.take_released()) == [0, 2] and controller.take_released() == []
    assert members[2].switched == [2]         # waiting member 2 copied member 0's version 1 as its version 2
    copied = members[2].store.get(key=weights_key(policy="member2", version=2))
    assert np.array_equal(copied.arrays["w"], np.full(3, 9.0, np.float32)) and controller.exploits == 1
    assert members[1].switched == [] and 1 not in controller.pending


def test_the_last_member_to_end_copies_through_its_learner_version(population) -> None:
    controller, members = population
    end(controller, members, 0, 9.0)
    end(controller, members, 2, 5.0)
    end(controller, members, 1, 1.0)          # the worst ends last: its copy is its learner's next version
    assert sorted(controller.take_released()) == [0, 2] and members[1].switched == []
    assert controller.workflows[1].adopt_version(1) == 2 and controller.exploits == 1


def test_a_member_that_stops_releases_those_waiting_for_it(population) -> None:
    controller, members = population
    for i, value in enumerate((9.0, 5.0, 1.0)):
        end(controller, members, i, value)
    controller.take_released()
    end(controller, members, 0, 9.0)
    end(controller, members, 1, 5.0)          # round 1 ended by two; member 2 (round 0 only) is awaited
    assert controller.holds(0) and controller.holds(1)
    controller.on_stopped(2)                  # member 2's stop rule held after its round 0
    assert sorted(controller.take_released()) == [0, 1] and not controller.holds(0) and not controller.holds(1)


def test_a_member_whose_last_round_ranks_is_ranked_with_its_generation(population) -> None:
    controller, members = population
    end(controller, members, 2, 1.0)
    controller.on_stopped(2)                  # its last round: still ranked with round 0's generation
    assert controller.holds(2)
    end(controller, members, 0, 9.0)
    end(controller, members, 1, 5.0)
    assert members[2].switched == [2] and 2 in controller.take_released()
