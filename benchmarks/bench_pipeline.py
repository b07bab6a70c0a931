"""Pipelined rollout (``pipeline_stage_num: 2``) vs sequential, against max(env-only, policy-only).

Measures, in one run and on the same env and policy:

* env-only: ``N`` chunk steps of ``B`` sub-envs with fixed random actions (no policy);
* policy-only: ``N`` ``act`` calls on a batch of ``B`` observations (no env);
* sequential rollout: the collector with one stage (policy, then env, per chunk);
* pipelined rollout, S = 2, env stages stepping in threads of the main process;
* pipelined rollout, S = 2, each env stage in its own worker process (``num_workers: 1``).

The policy is calibrated so that its inference costs about as much as the env (the case where
pipelining matters most). Prints the times and the ratios; ideal pipelining gives
``pipelined / max(env, policy) = 1`` and ``pipelined / sequential = 0.5``::

    OMP_NUM_THREADS=1 python benchmarks/bench_pipeline.py [--env auto|metaworld|reach|reach-sleep] \
        [--num-envs 8] [--chunks 8] [--steps 16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

from rlinf_core.rl.collector import RolloutCollector  # noqa: E402
from scale_common import (  # noqa: E402
    calibrate_policy,
    env_kind,
    fmt_table,
    free_cores,
    interleaved,
    load_line,
    make_env,
    random_actions,
    time_median,
)


def _stage_envs(kind: str, B: int, S: int, workers: int, image_size: int) -> list:
    envs = []
    for s in range(S):
        env = make_env(kind, B // S, image_size, num_workers=workers, ignore_terminations=True)
        env.shard(s, S)
        envs.append(env)
    return envs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="auto", choices=["auto", "metaworld", "reach", "reach-sleep"])
    parser.add_argument("--num-envs", type=int, default=8, help="B, sub-envs (all stages together)")
    parser.add_argument("--chunks", type=int, default=8, help="C, env steps per chunk")
    parser.add_argument("--steps", type=int, default=16, help="N, chunk steps per measured rollout")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    kind, B, C, N = env_kind(args.env), args.num_envs, args.chunks, args.steps
    print(f"env {kind}, B={B}, C={C}, N={N} chunk steps, {load_line()}")

    env = make_env(kind, B, args.image_size, ignore_terminations=True)
    obs = env.reset()
    acts = random_actions(B, C, env.action_dim)
    env.chunk_step(acts)
    t_env = time_median(lambda: [env.chunk_step(acts) for _ in range(N)], 3)
    state_dim = obs.states.shape[1] if obs.states is not None else 0
    policy = calibrate_policy(obs, t_env / N, env.action_dim, C, state_dim)
    with torch.no_grad():
        acts = policy.act(obs).actions  # env-only replays policy-like actions (same kind of motion)

    variants = {
        "sequential (S=1)": (1, 0),
        "pipelined S=2, env in threads": (2, 0),
        "pipelined S=2, env in worker processes": (2, 1),
    }
    collectors = {}
    for name, (S, W) in variants.items():
        collectors[name] = RolloutCollector(_stage_envs(kind, B, S, W, args.image_size), policy, need_values=False)
        collectors[name].collect(1, True, 1.0, reset=True)  # build simulators, start workers, warm up

    def rollout(c):
        return lambda: c.collect(N, True, 1.0, reset=False)

    fns = {
        "env only": lambda: [env.chunk_step(acts) for _ in range(N)],
        "policy only": lambda: [policy.act(obs) for _ in range(N)],
        **{name: rollout(c) for name, c in collectors.items()},
    }
    with torch.no_grad():
        t = interleaved(fns, args.rounds)
    env.close()
    for c in collectors.values():
        c.close()
        for e in c.envs:
            e.close()
    bound = max(t["env only"], t["policy only"])
    seq = t["sequential (S=1)"]
    print(fmt_table([(k, f"{v:.3f}") for k, v in t.items()], ("rollout of N chunk steps", "seconds (median)")))
    print()
    print(f"sequential / (env + policy)  = {seq / (t['env only'] + t['policy only']):.2f}")
    for name in variants:
        if name != "sequential (S=1)":
            print(f"{name:40s}: / max(env, policy) = {t[name] / bound:.2f}, / sequential = {t[name] / seq:.2f}")
    print(f"{load_line()}; free cores measured now: {free_cores():.1f} of 2")


if __name__ == "__main__":
    main()
