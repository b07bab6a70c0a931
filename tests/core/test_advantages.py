"""GAE and GRPO advantages against plain reference loops."""

import statistics

import pytest
import torch

from rlinf_core.rl.algorithms.advantages import gae, group_filter_mask, group_normalized_scores


def gae_reference(rewards, values, term, trunc, boot, gamma, lam):
    T, B = rewards.shape
    adv = torch.zeros(T, B)
    for b in range(B):
        last = 0.0
        for t in reversed(range(T)):
            if term[t, b]:
                next_v, cont = 0.0, 0.0
            elif trunc[t, b]:
                next_v, cont = boot[t, b].item(), 0.0
            else:
                next_v, cont = values[t + 1, b].item(), 1.0
            delta = rewards[t, b].item() + gamma * next_v - values[t, b].item()
            last = delta + gamma * lam * cont * last
            adv[t, b] = last
    return adv, adv + values[:-1]


def test_gae_matches_reference_loop_with_terminations_and_truncations():
    g = torch.Generator().manual_seed(0)
    T, B = 17, 5
    rewards = torch.randn(T, B, generator=g)
    values = torch.randn(T + 1, B, generator=g)
    term = torch.rand(T, B, generator=g) < 0.1
    trunc = (torch.rand(T, B, generator=g) < 0.1) & ~term
    boot = torch.randn(T, B, generator=g)
    adv, ret = gae(rewards, values, term, trunc, boot, gamma=0.97, gae_lambda=0.9)
    ref_adv, ref_ret = gae_reference(rewards, values, term, trunc, boot, 0.97, 0.9)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_truncation_bootstraps_and_termination_does_not():
    rewards = torch.zeros(1, 2)
    values = torch.tensor([[0.0, 0.0], [5.0, 5.0]])  # V of the *next* episode's first obs: must be ignored
    term = torch.tensor([[True, False]])
    trunc = torch.tensor([[False, True]])
    boot = torch.tensor([[3.0, 3.0]])
    adv, _ = gae(rewards, values, term, trunc, boot, gamma=0.5, gae_lambda=1.0)
    assert adv[0, 0] == 0.0  # terminal: no bootstrap
    assert adv[0, 1] == 1.5  # truncated: γ·V(final obs)


def test_no_critic_gives_reward_to_go():
    rewards = torch.tensor([[1.0], [0.0], [2.0]])
    values = torch.zeros(4, 1)
    no = torch.zeros(3, 1, dtype=torch.bool)
    adv, _ = gae(rewards, values, no, no, None, gamma=1.0, gae_lambda=1.0)
    assert adv.flatten().tolist() == [3.0, 2.0, 2.0]


def test_group_normalized_scores_reference():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    adv = group_normalized_scores(scores, 4)
    for g in range(2):
        s = scores[4 * g : 4 * g + 4]
        ref = (s - s.mean()) / (s.std(unbiased=True) + 1e-6)
        torch.testing.assert_close(adv[4 * g : 4 * g + 4], ref)


def test_group_normalized_scores_batch_and_none_scaling_reference():
    scores = torch.tensor([10.0, 10.1, 9.9, 10.0, 0.0, 30.0, 5.0, 25.0])
    batch_std = statistics.stdev(scores.tolist())
    for scale, div in (("batch", batch_std + 1e-6), ("none", 1.0)):
        adv = group_normalized_scores(scores, 4, scale=scale)
        for g in range(2):
            s = scores[4 * g : 4 * g + 4].tolist()
            ref = torch.tensor([(x - sum(s) / 4) / div for x in s])
            torch.testing.assert_close(adv[4 * g : 4 * g + 4], ref)
    # the near-tied first group keeps small advantages under batch scaling, ±1-sized under group scaling
    assert group_normalized_scores(scores, 4, scale="batch")[:4].abs().max() < 0.02
    assert group_normalized_scores(scores, 4)[:4].abs().max() > 1.0
    with pytest.raises(ValueError, match="scale must be"):
        group_normalized_scores(scores, 4, scale="rank")


def test_group_filter_drops_all_success_and_all_fail_groups():
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    keep = group_filter_mask(scores, 2, 0.1, 0.9)
    assert keep.tolist() == [False, False, False, False, True, True]


class ThreadReducer:
    """All-reduce between threads (one per simulated rank): every rank gets the sum / max of all ranks' values."""

    def __init__(self, world: int) -> None:
        import threading

        self.world, self.local = world, threading.local()
        self.barrier = threading.Barrier(world)
        self.slots: list = [None] * world

    def _reduce(self, x: torch.Tensor, op) -> torch.Tensor:
        self.slots[self.local.rank] = x.clone()
        self.barrier.wait()
        out = op(torch.stack(self.slots))
        self.barrier.wait()
        return out

    def sum(self, x):
        return self._reduce(x, lambda t: t.sum(0))

    def max(self, x):
        return self._reduce(x, lambda t: t.max(0).values)


def _grpo_traj(scores: torch.Tensor, group_size: int):
    from rlinf_core.contracts.observation import Observation
    from rlinf_core.rl.data.trajectory import Trajectory

    B = scores.shape[0]
    obs = Observation(main_images=torch.zeros(B, 2, 2, 3, dtype=torch.uint8), task_descriptions=["t"] * B)
    ones = torch.ones(1, B, 1, dtype=torch.bool)
    return Trajectory(
        obs=[obs],
        records=[{"action_tokens": torch.zeros(B, 1, 1, dtype=torch.long)}],
        logprobs=torch.zeros(1, B, 1, 1),
        values=None,
        rewards=scores.view(1, B, 1).float(),
        terminations=ones,
        truncations=~ones,
        valid=ones,
        bootstrap_values=torch.zeros(1, B, 1),
        reset_state_ids=torch.arange(B // group_size).repeat_interleave(group_size).view(1, B),
    )


def test_grpo_batch_scaling_uses_the_std_over_all_ranks():
    import threading

    from rlinf_core.rl.algorithms import GRPO

    G = 4
    # rank 0 has near-tied groups, rank 1 spread-out ones: per-rank stds differ a lot from the global one
    per_rank = [
        torch.tensor([1.0, 1.1, 0.9, 1.0, 2.0, 2.1, 2.0, 1.9]),
        torch.tensor([0.0, 5.0, 10.0, 3.0, 8.0, 1.0, 9.0, 4.0]),
    ]
    reducer, out = ThreadReducer(2), [None, None]

    def run(rank):
        reducer.local.rank = rank
        samples, _ = GRPO(scale_rewards="batch").compute([_grpo_traj(per_rank[rank], G)], G, reducer)
        out[rank] = samples.adv.view(-1)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    everything = torch.cat(per_rank)
    want = group_normalized_scores(everything, G, scale="batch")  # one process holding every rank's scores
    torch.testing.assert_close(torch.cat(out), want)


def test_grpo_task_scaling_divides_each_group_by_its_tasks_std_over_all_ranks():
    import threading
    from types import SimpleNamespace

    import numpy as np

    from rlinf_core.rl.algorithms import GRPO

    G = 2
    env = SimpleNamespace(
        group_size=G, auto_reset=False, task_ids=lambda ids: np.asarray(ids) // 10, task_names=["small", "large"]
    )
    # task 0 scores spread little, task 1 a lot; each rank holds one group of each
    per_rank = [(torch.tensor([1.0, 1.2, 9.0, 1.0]), [3, 17]), (torch.tensor([1.1, 0.8, 0.0, 6.0]), [5, 12])]
    reducer, out = ThreadReducer(2), [None, None]

    def run(rank):
        reducer.local.rank = rank
        scores, ids = per_rank[rank]
        traj = _grpo_traj(scores, G)
        traj.reset_state_ids = torch.tensor(ids).repeat_interleave(G).view(1, -1)
        grpo = GRPO(scale_rewards="task")
        grpo.check(env, policy=None)
        out[rank] = grpo.compute([traj], G, reducer)[0].adv.view(-1)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    task_scores = {0: [1.0, 1.2, 1.1, 0.8], 1: [9.0, 1.0, 0.0, 6.0]}
    want = []
    for scores, ids in per_rank:
        for g, task in enumerate(i // 10 for i in ids):
            pair = scores[g * G : (g + 1) * G].tolist()
            mean = sum(pair) / G
            want += [(s - mean) / (statistics.stdev(task_scores[task]) + 1e-6) for s in pair]
    torch.testing.assert_close(torch.cat(out), torch.tensor(want))
