"""``rlinf fit`` with 2 CPU ranks of DDP, FSDP2 and DeepSpeed ZeRO-2: PPO with the critic on the reach env (two RL
steps, clipping at 1.0, one eval), for two variants of the tiny checkpoint:

- ``pi05_vlm_critic``: π0.5, critic after the VLM (``value_after_vlm``) and the whole model trained
  (``train_expert_only: false``): SigLIP and Gemma layers are FSDP units, the tied ``embed_tokens`` / ``lm_head``
  sits in the root unit, the critic's gradient reaches PaliGemma. One micro-batch per rank and step.
- ``pi0_lora``: π0, LoRA on PaliGemma (peft wrapper inside the sharded policy), expert in full, the expert critic
  with its gradient into the expert (``detach_critic_input: false``); the export merges the adapters. Two
  micro-batches per rank and step (gradient accumulation).

Why π0.5 runs without gradient accumulation: with it, DeepSpeed ends 1.2e-4 from DDP (FSDP2: 5e-7), the largest at
``value_head.mlp.0.weight``, while the first RL step's logged gradient norm is equal to every printed digit and
DeepSpeed's bucket sizes change nothing; without it DeepSpeed is 2.9e-7 from DDP. DeepSpeed reduces each
micro-batch's gradients and sums the reduced ones, DDP sums locally and reduces once: the same sum in another
order, whose rounding Adam enlarges where a gradient element is near zero (as for the key biases above; measured
2026-11-26, a rounding explanation consistent with these numbers, not a proof). DeepSpeed's accumulation is still
checked against DDP here (``pi0_lora``) and in tests/scale/test_strategies_multiprocess.py.

Checked (besides :func:`rlinf_core.testing.multirank.check_ranks`: disjoint shards, whole metrics and eval, both ranks
end identical, training changed the parameters): FSDP2 really shards the policy; the first update equals DDP's;
the exported end parameters equal DDP's within 2e-5 (4 AdamW steps of lr 1e-3 move them by ~4e-3) except
SigLIP's attention key biases, whose gradient is zero in exact arithmetic (the softmax over keys ignores a shift
shared by all keys): Adam normalises their rounding noise to full ±lr steps, which differ with the reduction order;
every export loads again with ``OpenPIPolicy.from_pretrained``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlinf_core.builtin.toy_env import ReachEnv
from rlinf_core.testing.multirank import check_ranks, exported_weights, reach_config, run_fit, weight_distance

pytestmark = pytest.mark.slow

VARIANTS = {
    "pi05_vlm_critic": ({"pi05": True}, {"critic": {"after_vlm": True}, "train_expert_only": False}),
    "pi0_lora": ({"pi05": False}, {"lora": {"rank": 4}, "critic": {"detach_input": False}}),
}
STRATEGIES = {
    "fsdp2": {"class_path": "rlinf_core.distributed.strategies.FSDP2Strategy"},
    "deepspeed": {"class_path": "rlinf_core.distributed.strategies.DeepSpeedStrategy", "init_args": {"stage": 2}},
}
OPTIM = {"lr": 1e-3, "clip_grad": 1.0}  # gradient norms are 3-25 in both variants: the steps are clipped
MICRO_BATCH = {"pi05_vlm_critic": 8, "pi0_lora": 4}  # global batch 16 on 2 ranks: 8 = no accumulation (docstring)
ATOL = 2e-5
ZERO_GRAD = ".self_attn.k_proj.bias"  # SigLIP key biases: gradient 0 up to rounding (see the module docstring)


def _checkpoint(tiny, variant: str):
    return tiny(
        layout="rlinf", action_dim=2, action_horizon=2, max_token_len=48, value_head=False, **VARIANTS[variant][0]
    )


def _fit(tmp_path, tiny, variant: str, strategy) -> list[dict]:
    policy = {
        "class_path": "OpenPIPolicy",
        "init_args": {
            "model_path": str(_checkpoint(tiny, variant)),
            "action_dim": 2,
            "num_action_chunks": 2,
            "num_steps": 3,
            "add_value_head": True,
            "noise": {"method": "flow_sde"},
            **VARIANTS[variant][1],
        },
    }
    extra = {"optim": OPTIM, "micro_batch_size": MICRO_BATCH[variant]}
    records = run_fit(tmp_path, reach_config(tmp_path, strategy, "PPO", policy, model_extra=extra))
    check_ranks(records)
    return records


def _start_weights(tiny, variant: str) -> dict[str, torch.Tensor]:
    """The checkpoint's weights in export names (without the critic, initialised at random in the runs)."""
    from rlinf_policy_openpi.policy import OpenPIPolicy

    return OpenPIPolicy(str(_checkpoint(tiny, variant)), action_dim=2, add_value_head=False).state_dict_for_export()


@pytest.fixture(scope="module", params=list(VARIANTS))
def ddp_run(request, tiny, tmp_path_factory):
    """The reference: DDP on the same config, per variant."""
    variant = request.param
    return variant, _fit(tmp_path_factory.mktemp(f"ddp_{variant}"), tiny, variant, "ddp")


def _reloads(records: list[dict], variant: str) -> None:
    from rlinf_policy_openpi.policy import OpenPIPolicy

    exported = Path(records[0]["log_dir"]) / "policy"
    policy = OpenPIPolicy.from_pretrained(exported)
    assert (policy.is_pi05, policy.value_after_vlm) == (variant == "pi05_vlm_critic",) * 2
    assert (policy.action_dim, policy.num_action_chunks, policy.num_steps, policy.has_value_head) == (2, 2, 3, True)
    saved = load_file(exported / "model.safetensors")
    state = policy.state_dict_for_export()
    assert state.keys() == saved.keys()
    assert all(torch.equal(state[k], saved[k]) for k in saved), "the reloaded weights differ from the export"
    env = ReachEnv(num_envs=2, max_episode_steps=4, image_size=16, seed=0)
    out = policy.act(env.reset())
    assert out.actions.shape == (2, 2, 2) and torch.isfinite(out.actions).all() and out.values.shape == (2, 1)


@pytest.mark.slow
def test_ddp_reference_trains_and_its_export_reloads(ddp_run):
    variant, records = ddp_run
    assert all(r["strategy"] == "DDPStrategy" for r in records)
    _reloads(records, variant)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_sharded_strategy_matches_ddp(tmp_path, tiny, ddp_run, strategy):
    variant, reference = ddp_run
    records = _fit(tmp_path, tiny, variant, STRATEGIES[strategy])
    if strategy == "fsdp2":
        assert all(r["strategy"] == "FSDP2Strategy" and r["sharded_params"] for r in records), "policy not sharded"
    else:
        assert all(r["strategy"] == "DeepSpeedStrategy" and r["model_type"] == "DeepSpeedEngine" for r in records)
    assert records[0]["digest_start"] == reference[0]["digest_start"], "not the same initial policy as DDP"
    got, want = records[0]["epochs"][0]["metrics"], reference[0]["epochs"][0]["metrics"]
    for key in ("env/return", "env/num_trajectories", "rollout/rewards", "rollout/advantages_mean"):
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), key
    for key in ("train/loss", "train/actor/grad_norm", "train/critic/value_loss"):
        assert got[key] == pytest.approx(want[key], rel=1e-3, abs=1e-6), key
    ref, start = exported_weights(reference), _start_weights(tiny, variant)
    moved = max((ref[k] - start[k]).abs().max().item() for k in start if not k.endswith(ZERO_GRAD))
    assert moved > 100 * ATOL, f"training barely moved the weights ({moved:.1e}): the comparison would be vacuous"
    dist, where = weight_distance(records, reference, skip=(ZERO_GRAD,))
    assert dist <= ATOL, f"{strategy} ended {dist:.1e} away from DDP at {where}"
    _reloads(records, variant)
