"""Host reads per learner update (post-processing included) for every single-agent algorithm: a small bound that
does not grow with the number of minibatches (DESIGN.md §6, the hot path). Counted on the CPU by
tests/host_reads.py, where each read is a place a CUDA stream would synchronise.

nimbus's Adam is fused on the CPU as on CUDA (algos/step.py ``make_adam``): it reads none of its step counts on the
host (a non-fused Adam's ``item()`` of each, counted apart in ``host_counters``) and skips a non-finite step itself, so
the counts here are what a CUDA update reads."""

from __future__ import annotations

import pytest
import torch

from tests.algo_batches import ROWS, make_case, run_update
from tests.host_reads import HostReads, count_host_reads

# name -> (config field that sets the rows per gradient step, the two values, reads allowed per update)
# ppo: the statistics once; dqn: the step count and the statistics; sac: its noise seed, the step count, the
# statistics; impala: the statistics (with the step count); impact: + the target's cadence (the step count)
MINIBATCHES = {
    "ppo": ("minibatch_size", (32, 8), 1),
    "ppo_continuous": ("minibatch_size", (32, 8), 1),
    "dqn": ("batch_size", (32, 8), 2),
    "sac": ("batch_size", (32, 8), 3),
    "impala": ("rollout_length", (8, 4), 1),   # one gradient step per update, whatever the batch's shape
    "impact": ("rollout_length", (8, 4), 2),
}


def _reads(*, name: str, overrides: dict) -> HostReads:
    case = make_case(name=name, device=torch.device("cpu"), seed=0, overrides=overrides)
    run_update(case=case, seed=0)  # a first update creates the optimizer's state: count a steady one
    with count_host_reads(optimizers=[case.optimizer]) as reads:
        run_update(case=case, seed=1)
    return reads


@pytest.mark.parametrize("name", sorted(MINIBATCHES))
def test_host_reads_per_update_do_not_grow_with_the_minibatches(name: str) -> None:
    field, (few, many), allowed = MINIBATCHES[name]
    fewer, more = (_reads(name=name, overrides={field: size}) for size in (few, many))
    assert ROWS // many >= 2 * (ROWS // few)   # the second update really takes more gradient steps
    assert fewer.total <= allowed and more.total <= allowed, (fewer.by_kind, more.by_kind)
    assert more.total == fewer.total, (fewer.by_kind, more.by_kind)
    assert fewer.host_counters == more.host_counters == 0   # the fused Adam reads no step count on the host


def test_target_kl_is_read_once_per_epoch() -> None:
    reads = _reads(name="ppo", overrides={"minibatch_size": 8, "num_epochs": 3, "target_kl": 1e6})
    assert reads.total == 1 + 3, reads.by_kind


def test_dqn_td_errors_for_per_are_one_more_read() -> None:
    case = make_case(name="dqn", device=torch.device("cpu"), seed=0, overrides={"batch_size": 8})
    with count_host_reads(optimizers=[case.optimizer]) as reads:
        result = case.algo.update_with_td_errors(model=case.model, optimizer=case.optimizer,
                                                 batch=case.algo.postprocess(batch=case.batch), progress=0.5,
                                                 generator=torch.Generator().manual_seed(0))
    assert result.td_errors.shape == (ROWS,) and reads.total == 2 + 1, reads.by_kind


def _pipelined_reads(*, minibatch_size: int, loader: bool) -> HostReads:
    """A steady `StreamingPPOUpdate` (ARTOS's mini-batch and dual-stage pipelines) fed two blocks stage by stage,
    from its construction to ``finish``."""
    from nimbus.onpolicy.pipeline import STAGES, PipelineOptions, StreamingPPOUpdate

    case = make_case(name="ppo", device=torch.device("cpu"), seed=0, overrides={"minibatch_size": minibatch_size})
    block_rows = [ROWS // 2, ROWS // 2]
    case.batch["cut"][ROWS // 2 - 1] = case.batch["cut"][-1] = True   # GAE never crosses a block
    options = PipelineOptions(minibatch=True, dual_stage=True, loader=loader)

    def update(seed: int) -> None:
        stream = StreamingPPOUpdate(algo=case.algo, model=case.model, optimizer=case.optimizer,
                                    block_rows=block_rows, options=options, progress=0.25,
                                    generator=torch.Generator().manual_seed(seed))
        for block, start in enumerate((0, ROWS // 2)):
            for keys in STAGES:
                stream.add_stage(block=block, arrays={key: case.batch[key][start:start + ROWS // 2] for key in keys})
        stream.finish()

    update(0)   # a first update creates the optimizer's state: count a steady one
    with count_host_reads(optimizers=[case.optimizer]) as reads:
        update(1)
    return reads


@pytest.mark.parametrize("loader", [False, True])
def test_pipelined_ppo_reads_the_host_once_per_invocation(loader: bool) -> None:
    """The pipelined learner's update reads its statistics (with the explained variance) once, however many
    minibatches its epochs take."""
    fewer, more = (_pipelined_reads(minibatch_size=size, loader=loader) for size in (32, 8))
    assert fewer.total <= 1 and more.total <= 1, (fewer.by_kind, more.by_kind)
    assert more.total == fewer.total, (fewer.by_kind, more.by_kind)
