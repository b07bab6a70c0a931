"""The RolloutBuffer owns one RL step's data: micro-batches carry their samples and denominators, and are read only
by the step they were filled for (also right after a resume, where Lightning has no public hook that says which
step a dataloader iterator belongs to)."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

import lightning.pytorch as pl

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.builtin.toy_policy import TinyVLAPolicy
from rlinf_core.contracts.observation import Observation
from rlinf_core.rl.algorithms import PPO
from rlinf_core.rl.buffer import RolloutBuffer
from rlinf_core.rl.config import RolloutConfig
from rlinf_core.rl.module import RLModule
from rlinf_core.rl.algorithms.trajectory import Samples


def make_module() -> RLModule:
    torch.manual_seed(0)
    return RLModule(
        env=ReachEnv(num_envs=4, max_episode_steps=4), policy=TinyVLAPolicy(action_dim=2, num_action_chunks=2,
        add_value_head=True), algorithm=PPO(update_epoch=2), rollout=RolloutConfig(max_steps_per_rollout_epoch=4,
        show_progress=False), global_batch_size=4, micro_batch_size=2,
    )  # fmt: skip


def make_trainer(root, epochs: int, **kw) -> pl.Trainer:
    args = dict(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                check_val_every_n_epoch=1000, default_root_dir=str(root))
    return pl.Trainer(**{**args, **kw})


def _samples(n: int) -> Samples:
    obs = Observation(main_images=torch.zeros(n, 2, 2, 3, dtype=torch.uint8), task_descriptions=["t"] * n)
    mask = torch.zeros(n)
    mask[: n // 2] = 1
    return Samples(obs=obs, records={"tokens": torch.arange(n).view(n, 1)}, old_logprobs=torch.arange(n).float(),
                   adv=torch.randn(n), mask=mask)


def test_micro_batches_carry_their_samples_and_minibatch_denominators():
    buffer = RolloutBuffer(global_batch_size=8, micro_batch_size=3, update_epoch=2)
    samples = _samples(10)
    buffer.fill(5, samples, denominator=lambda m: m.sum().double(), reduce_sum=lambda x: x * 2, rank=0, world=2)
    mbs = list(buffer)
    assert len(mbs) == len(buffer) == buffer.num_micro_batches(10, world=2) == 10
    assert [m.last_of_step for m in mbs] == [False] * 9 + [True]
    for m in mbs:  # the data is the rows named by idx, the denominators those of the micro-batch's minibatch
        assert torch.equal(m.samples.old_logprobs, samples.old_logprobs[m.idx])
        assert torch.equal(m.samples.records["tokens"][:, 0], m.idx)
        rows = torch.cat([x.idx for x in mbs if x.minibatch == m.minibatch])
        assert m.denominators.policy == max(float(samples.mask[rows].sum()), 1.0)  # x2 ranks / world 2
    for epoch in range(2):  # every sample once per update epoch
        rows = torch.cat([m.idx for m in mbs if epoch * 3 <= m.minibatch < (epoch + 1) * 3])
        assert sorted(rows.tolist()) == list(range(10))
    with pytest.raises(LookupError, match="holds RL step 5's data, not step 6's"):
        buffer.micro_batch(6, 0)
    buffer.clear()
    with pytest.raises(LookupError):
        buffer.micro_batch(5, 0)


def test_the_shuffle_is_a_function_of_step_and_rank():
    orders = {}
    for step, rank in [(0, 0), (1, 0), (0, 1), (0, 0)]:
        buffer = RolloutBuffer(global_batch_size=8, micro_batch_size=4, update_epoch=1)
        buffer.fill(step, _samples(8), lambda m: m.sum(), lambda x: x, rank=rank, world=2)
        orders.setdefault((step, rank), []).append(torch.cat([m.idx for m in buffer]).tolist())
    assert orders[(0, 0)][0] == orders[(0, 0)][1]
    assert len({tuple(v[0]) for v in orders.values()}) == 3


class StepRecorder(Callback):
    """Per training_step: the RL step Lightning runs and the shuffle of the buffer it reads."""

    def __init__(self) -> None:
        self.steps: dict[int, list[int]] = {}
        self.batches: list[tuple[int, int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        assert batch == batch_idx
        self.batches.append((trainer.current_epoch, pl_module.buffer.step))
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
    make_trainer(tmp_path / "b", 1, enable_checkpointing=True, callbacks=[saver]).fit(
        make_module()
    )
    resumed = StepRecorder()
    make_trainer(tmp_path / "c", 2, callbacks=[resumed]).fit(
        make_module(), ckpt_path=saver.last_model_path
    )
    assert set(resumed.steps) == {1} and all(epoch == step == 1 for epoch, step in resumed.batches)
    assert resumed.steps[1] == whole.steps[1] != whole.steps[0]
