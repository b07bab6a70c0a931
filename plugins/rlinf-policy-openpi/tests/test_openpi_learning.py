"""The tiny π0 learns on the built-in reach env through the real RL loop (PPO, flow-SDE log-probs, the detached
expert critic of RLinf's metaworld_50_ppo_openpi), as the built-in tiny policies do in tests/core/test_rl_loop.py.

As in the seeds' recipe (SFT checkpoint, then RL), the policy first imitates a *weak* scripted expert (it heads for
the target at 30 % of the needed speed, so episodes often time out): a random flow maps its N(0, I) noise to
near-random actions, so RL from scratch mostly learns noise, while a flow fitted to demonstrations is concentrated
and the one noise-injected denoise step explores around it. PPO must then speed the motion up.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlinf.algorithms import PPO
from rlinf.config import OptimConfig, RolloutConfig
from rlinf.module import RLModule
from rlinf.testing.reach_demos import reach_expert
from rlinf.testing.toy_env import ReachEnv


def _scalars(trainer, tag):
    acc = EventAccumulator(trainer.logger.log_dir)
    acc.Reload()
    return [e.value for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def _imitate_weak_expert(policy, steps: int = 80, speed: float = 0.3) -> None:
    """``steps`` Adam steps of :meth:`OpenPIPolicy.sft_loss` on ``speed`` × the scripted expert, in states visited
    by a noisy expert."""
    env = ReachEnv(num_envs=64, max_episode_steps=24, auto_reset=True, seed=3)
    obs = env.reset()
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-3)
    for _ in range(steps):
        act = torch.from_numpy(reach_expert(obs)) * speed
        policy.train()
        loss = policy.sft_loss(obs, act[:, None].expand(-1, 2, -1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        obs = env.chunk_step((act + 0.5 * torch.randn_like(act)).clamp(-1, 1)[:, None].expand(-1, 2, -1)).obs


def test_ppo_improves_the_tiny_pi0_on_the_reach_env(tiny, tmp_path):
    from rlinf_policy_openpi.policy import OpenPIPolicy

    path = tiny(layout="rlinf", action_dim=2, action_horizon=2, max_token_len=12, value_head=False)
    torch.manual_seed(0)
    policy = OpenPIPolicy(str(path), num_steps=3, num_action_chunks=2, add_value_head=True, detach_critic_input=True)
    _imitate_weak_expert(policy)
    module = RLModule(
        env=ReachEnv(num_envs=32, max_episode_steps=24, auto_reset=True), policy=policy, algorithm=PPO(update_epoch=4),
        rollout=RolloutConfig(max_steps_per_rollout_epoch=24, show_progress=False),
        optim=OptimConfig(lr=3e-4, value_lr=1e-2), global_batch_size=96, micro_batch_size=96,
    )
    trainer = pl.Trainer(
        max_epochs=40, accelerator="cpu", devices=1, logger=TensorBoardLogger(str(tmp_path), name="t"),
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        use_distributed_sampler=False, log_every_n_steps=1, check_val_every_n_epoch=1000,
    )
    trainer.fit(module)
    success = _scalars(trainer, "env/success_once")
    start, end = sum(success[:8]) / 8, sum(success[-8:]) / 8
    print(f"success_once {start:.3f} -> {end:.3f}")  # shown with pytest -s
    assert end > start + 0.1, (start, end)
    assert max(_scalars(trainer, "train/critic/explained_variance")) > 0.2
