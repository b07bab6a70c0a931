"""The RolloutBuffer owns one RL step's data: micro-batches carry their samples, training_step receives them, and
they are read only by the step they were filled for (also right after a resume, where Lightning has no public hook
that says which step a dataloader iterator belongs to). Each micro-batch carries its minibatch's loss denominators,
all computed in one all-reduce at the fill."""

from __future__ import annotations

import dataclasses

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.contracts.observation import Observation
from rlinf_core.rl.algorithms import PPO
from rlinf_core.rl.buffer import RolloutBuffer
from rlinf_core.rl.config import RolloutConfig
from rlinf_core.rl.data.micro_batch import MicroBatch
from rlinf_core.rl.data.trajectory import Samples
from rlinf_core.rl.module import RLModule


def make_module() -> RLModule:
    torch.manual_seed(0)
    return RLModule(
        env=ReachEnv(num_envs=4, max_episode_steps=4), policy=TinyVLAPolicy(action_dim=2, num_action_chunks=2,
        add_value_head=True), algorithm=PPO(update_epoch=2), rollout=RolloutConfig(max_steps_per_rollout_epoch=4,
        show_progress=False), global_batch_size=4, micro_batch_size=2,
    )  # fmt: skip


def make_trainer(root, epochs: int, **kw) -> pl.Trainer:
    args = dict(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=1000,
        default_root_dir=str(root),
    )
    return pl.Trainer(**{**args, **kw})


def _samples(n: int) -> Samples:
    obs = Observation(main_images=torch.zeros(n, 2, 2, 3, dtype=torch.uint8), task_descriptions=["t"] * n)
    mask = torch.zeros(n)
    mask[: n // 2] = 1
    return Samples(
        obs=obs,
        records={"tokens": torch.arange(n).view(n, 1)},
        old_logprobs=torch.arange(n).float(),
        adv=torch.randn(n),
        mask=mask,
    )


class CountingReducer:
    """Two "ranks" holding the same data: sums double; counts the collective calls."""

    def __init__(self) -> None:
        self.calls = 0

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * 2


def test_micro_batches_carry_their_samples_and_their_minibatch_denominators():
    buffer = RolloutBuffer(global_batch_size=8, micro_batch_size=3, update_epoch=2)
    samples = _samples(10)
    samples.value_mask = torch.ones(10, 1)
    algorithm, reducer = PPO(update_epoch=2), CountingReducer()
    buffer.fill(5, samples, algorithm.denominator, rank=0, world=2, reduce=reducer)
    mbs = list(buffer)
    assert len(mbs) == len(buffer) == buffer.num_micro_batches(10, world=2) == 10
    assert [m.last_of_step for m in mbs] == [False] * 9 + [True]
    assert [(m.step, m.index) for m in mbs] == [(5, i) for i in range(10)]
    assert reducer.calls == 1 and len(buffer.denominators) == 6  # one all-reduce for every minibatch
    for m in mbs:  # the data is the rows named by idx, the denominators those of the micro-batch's minibatch
        assert torch.equal(m.samples.old_logprobs, samples.old_logprobs[m.idx])
        assert torch.equal(m.samples.records["tokens"][:, 0], m.idx)
        rows = torch.cat([x.idx for x in mbs if x.minibatch == m.minibatch])
        assert torch.equal(torch.sort(buffer.minibatch_rows()[m.minibatch]).values, torch.sort(rows).values)
        denominators = m.denominators
        assert denominators.policy == max(float(samples.mask[rows].sum()), 1.0)  # x2 ranks / world 2
        assert denominators.value == float(len(rows))
    for epoch in range(2):  # every sample once per update epoch
        rows = torch.cat([m.idx for m in mbs if epoch * 3 <= m.minibatch < (epoch + 1) * 3])
        assert sorted(rows.tolist()) == list(range(10))
    with pytest.raises(LookupError, match="holds RL step 5's data, not step 6's"):
        buffer.micro_batch(6, 0)
    buffer.clear()
    with pytest.raises(LookupError):
        buffer.micro_batch(5, 0)


def _tensors(value) -> list[torch.Tensor]:
    """Every tensor in a (nested) dataclass / dict / list."""
    if torch.is_tensor(value):
        return [value]
    if dataclasses.is_dataclass(value):
        return [t for f in dataclasses.fields(value) for t in _tensors(getattr(value, f.name))]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def test_a_micro_batch_moves_all_of_its_samples_so_the_loss_moves_nothing():
    samples = _samples(8)
    samples.old_values, samples.value_targets = torch.zeros(8, 1), torch.ones(8, 1)
    samples.value_mask, samples.loss_weight = torch.ones(8, 1), torch.ones(8)
    samples.ref_logprobs = samples.old_logprobs.clone()
    assert all(getattr(samples, f.name) is not None for f in dataclasses.fields(samples))
    buffer = RolloutBuffer(global_batch_size=8, micro_batch_size=4, update_epoch=1)
    buffer.fill(0, samples, PPO().denominator)
    moved = buffer.micro_batch(0, 1).to("meta")
    tensors = _tensors(moved.samples)
    assert len(tensors) == len(_tensors(buffer.micro_batch(0, 1).samples)) == 10  # image, record, 8 sample tensors
    assert all(t.is_meta for t in tensors)


def test_the_shuffle_is_a_function_of_step_and_rank():
    orders = {}
    for step, rank in [(0, 0), (1, 0), (0, 1), (0, 0)]:
        buffer = RolloutBuffer(global_batch_size=8, micro_batch_size=4, update_epoch=1)
        buffer.fill(step, _samples(8), PPO().denominator, rank=rank, world=2)
        orders.setdefault((step, rank), []).append(torch.cat([m.idx for m in buffer]).tolist())
    assert orders[(0, 0)][0] == orders[(0, 0)][1]
    assert len({tuple(v[0]) for v in orders.values()}) == 3


class StepRecorder(Callback):
    """Per training_step: the RL step Lightning runs, the step of the micro-batch it receives and the step's
    shuffle."""

    def __init__(self) -> None:
        self.steps: dict[int, list[int]] = {}
        self.batches: list[tuple[int, int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        assert isinstance(batch, MicroBatch) and batch.index == batch_idx  # training_step receives its data
        self.batches.append((trainer.current_epoch, batch.step))
        if batch_idx == 0:
            self.steps[trainer.current_epoch] = torch.cat([m.idx for m in pl_module.buffer]).tolist()


def test_each_step_reads_its_own_shuffle_also_right_after_a_resume(tmp_path):
    """Lightning starts the first epoch's dataloader iterator before ``on_train_epoch_start`` (and, in a fit
    resumed from an end-of-epoch checkpoint, while ``current_epoch`` still names the finished epoch): the step
    after a resume must still train on its own shuffle, the one an uninterrupted run uses."""
    whole = StepRecorder()
    make_trainer(tmp_path / "a", 2, callbacks=[whole]).fit(make_module())
    assert [step for _, step in whole.batches] == [0] * 8 + [1] * 8  # 8 samples / 2 per pass x 2 update epochs
    assert all(epoch == step for epoch, step in whole.batches)

    saver = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), save_last=True, save_on_train_epoch_end=True)
    make_trainer(tmp_path / "b", 1, enable_checkpointing=True, callbacks=[saver]).fit(make_module())
    resumed = StepRecorder()
    make_trainer(tmp_path / "c", 2, callbacks=[resumed]).fit(make_module(), ckpt_path=saver.last_model_path)
    assert set(resumed.steps) == {1} and all(epoch == step == 1 for epoch, step in resumed.batches)
    assert resumed.steps[1] == whole.steps[1] != whole.steps[0]
