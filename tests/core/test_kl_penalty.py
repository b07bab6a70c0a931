"""The KL penalty toward the reference policy: the estimators against the exact KL of two categoricals, the loss
term against a loop, and the RL loop's reference (the starting policy, also after a resume)."""

import math

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from tests.core.test_loss_agg import G, _trajectory, _whole
from tests.core.test_rl_loop import make_module, make_trainer, scalars

from rlinf_core.contracts.policy import EvaluateOutput
from rlinf_core.distributed.reduce import Reducer
from rlinf_core.rl.algorithms.grpo import GRPO
from rlinf_core.rl.algorithms.losses import kl_penalty
from rlinf_core.rl.config import OptimConfig, RolloutConfig


def test_estimators_are_their_formulas_entry_by_entry():
    g = torch.Generator().manual_seed(0)
    logp, ref = -torch.rand(50, generator=g) * 3, -torch.rand(50, generator=g) * 3
    for estimator, formula in (
        ("k1", lambda lp, r: lp - r),
        ("k2", lambda lp, r: 0.5 * (r - lp) ** 2),
        ("k3", lambda lp, r: math.exp(r - lp) - (r - lp) - 1),
    ):
        expected = torch.tensor([formula(a, b) for a, b in zip(logp.tolist(), ref.tolist(), strict=True)])
        torch.testing.assert_close(kl_penalty(logp, ref, estimator), expected)
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    assert kl_penalty(torch.tensor([0.0]), torch.tensor([1e4]), "k3").isfinite().all()  # clamped before exp
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_penalty(logp, ref, "low_var")


def test_k1_and_k3_average_to_the_exact_kl_of_two_categoricals():
    """Both are unbiased under samples of π_θ: their means over N draws are KL(π_θ ‖ π_ref) within 5 standard
    errors (their own sample std / √N), against torch.distributions' closed form."""
    g = torch.Generator().manual_seed(0)
    p = torch.distributions.Categorical(logits=torch.randn(7, generator=g))
    q = torch.distributions.Categorical(logits=torch.randn(7, generator=g))
    exact = torch.distributions.kl_divergence(p, q).double()
    torch.manual_seed(1)
    actions = p.sample((200_000,))
    logp, ref = p.log_prob(actions).double(), q.log_prob(actions).double()
    for estimator in ("k1", "k3"):
        draws = kl_penalty(logp, ref, estimator)
        se = draws.std() / math.sqrt(draws.numel())
        assert abs(draws.mean() - exact) < 5 * se, (estimator, draws.mean().item(), exact.item(), se.item())


def test_the_loss_adds_beta_times_the_masked_mean_kl_at_the_logprob_level():
    traj = _trajectory()
    beta = 0.05
    with_kl, without = GRPO(kl_beta=beta), GRPO()
    samples, _ = with_kl.compute([traj], G, Reducer())
    g = torch.Generator().manual_seed(2)
    samples.ref_logprobs = samples.old_logprobs + 0.2 * torch.randn(samples.old_logprobs.shape, generator=g)
    logp = (samples.old_logprobs + 0.3 * torch.randn(samples.old_logprobs.shape, generator=g)).requires_grad_(True)
    denom = float(with_kl.denominator(samples.mask))
    loss, metrics = with_kl.loss(EvaluateOutput(logprobs=logp), _whole(samples, denom))
    plain, _ = without.loss(EvaluateOutput(logprobs=logp), _whole(samples, denom))

    # token level: the [S, C] mask covers every one of the D tokens of a valid sub-step
    S, C, D = logp.shape
    terms, count = [], 0
    for s in range(S):
        for c in range(C):
            if samples.mask[s, c]:
                count += D
                for d in range(D):
                    diff = samples.ref_logprobs[s, c, d] - logp[s, c, d]
                    terms.append(torch.exp(diff) - diff - 1)
    reference_kl = torch.stack(terms).sum() / count
    torch.testing.assert_close(metrics["train/actor/kl_to_reference"], reference_kl.detach())
    torch.testing.assert_close(loss, plain + beta * reference_kl)
    (grad,) = torch.autograd.grad(loss, logp)
    (expected,) = torch.autograd.grad(plain + beta * reference_kl, logp)
    torch.testing.assert_close(grad, expected)


def test_a_penalty_without_reference_logprobs_is_a_bug_and_bad_settings_are_explained():
    traj = _trajectory()
    algo = GRPO(kl_beta=0.1)
    samples, _ = algo.compute([traj], G, Reducer())
    out = EvaluateOutput(logprobs=samples.old_logprobs.clone())
    with pytest.raises(RuntimeError, match="ref_logprobs"):
        algo.loss(out, _whole(samples, float(algo.denominator(samples.mask))))
    with pytest.raises(ValueError, match="kl_beta"):
        GRPO(kl_beta=-1.0)
    with pytest.raises(ValueError, match="kl_penalty"):
        GRPO(kl_beta=0.1, kl_penalty="full")


def _kl_module(beta: float, lr: float):
    module = make_module(
        "grpo", num_envs=8, steps=8, rollout=RolloutConfig(max_steps_per_rollout_epoch=8, show_progress=False),
        optim=OptimConfig(lr=lr), global_batch_size=16, micro_batch_size=16,
    )  # fmt: skip
    module.algorithm.kl_beta = beta
    return module


def test_the_reference_is_the_starting_policy_and_the_penalty_keeps_the_policy_near_it(tmp_path):
    # lr 0: the policy stays the reference, so the penalty is 0 up to the rollout / update forward's rounding
    module = _kl_module(beta=1.0, lr=0.0)
    trainer = make_trainer(tmp_path / "still", 2)
    trainer.fit(module)
    assert max(scalars(trainer, "train/actor/kl_to_reference")) < 1e-6
    assert not any(p.requires_grad for p in module._reference_policy.parameters())
    assert "_reference_policy" not in dict(module.named_modules())  # not checkpointed, not optimised

    drift = {}
    for beta in (1e-6, 3.0):
        module = _kl_module(beta=beta, lr=3e-2)
        trainer = make_trainer(tmp_path / str(beta), 8)
        trainer.fit(module)
        drift[beta] = scalars(trainer, "train/actor/kl_to_reference")[-1]
    assert drift[3.0] < 0.5 * drift[1e-6], drift


def test_after_a_resume_the_reference_is_still_the_starting_policy(tmp_path):
    module = _kl_module(beta=0.1, lr=3e-2)
    start = {k: v.clone() for k, v in module.policy.state_dict().items()}
    saver = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), save_last=True, save_on_train_epoch_end=True)
    make_trainer(tmp_path, 2, enable_checkpointing=True, callbacks=[saver]).fit(module)
    trained = module.policy.state_dict()
    assert any(not torch.equal(trained[k], start[k]) for k in start), "the first fit trained the policy"

    resumed = _kl_module(beta=0.1, lr=3e-2)  # built from the same starting weights (make_module seeds them)
    make_trainer(tmp_path, 3).fit(resumed, ckpt_path=saver.last_model_path)
    reference = resumed._reference_policy.state_dict()
    for key, value in start.items():
        torch.testing.assert_close(reference[key], value, rtol=0, atol=0)
