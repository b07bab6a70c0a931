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

    OMP_NUM_THREADS=1 python benchmarks/bench_pipeline.py [--env auto|metaworld|reach|reach-sleep] [--num-envs 8] [--chunks 8] [--steps 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from scale_common import calibrate_policy, env_kind, fmt_table, load_line, make_env, random_actions, time_median  # noqa: E402

from rlinf.rollout.collector import RolloutCollector  # noqa: E402


def _stage_envs(kind: str, B: int, S: int, workers: int, image_size: int) -> list:
    envs = []
    for s in range(S):
        env = make_env(kind, B // S, image_size, num_workers=workers, ignore_terminations=True)
        env.shard(s, S)
        envs.append(env)
    return envs


def _rollout_time(envs, policy, steps: int, repeats: int) -> tuple[float, dict]:
    collector = RolloutCollector(envs, policy, need_values=False)
    collector.collect(1, True, 1.0, reset=True)  # build simulators, start workers, warm up
    t = time_median(lambda: collector.collect(steps, True, 1.0, reset=False), repeats)
    times = collector.times
    collector.close()
    for env in envs:
        env.close()
    return t, {"policy": times.policy, "env_wait": times.env_wait}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="auto", choices=["auto", "metaworld", "reach", "reach-sleep"])
    parser.add_argument("--num-envs", type=int, default=8, help="B, sub-envs (all stages together)")
    parser.add_argument("--chunks", type=int, default=8, help="C, env steps per chunk")
    parser.add_argument("--steps", type=int, default=8, help="N, chunk steps per measured rollout")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    kind, B, C, N = env_kind(args.env), args.num_envs, args.chunks, args.steps
    print(f"env {kind}, B={B}, C={C}, N={N} chunk steps, {load_line()}")

    env = make_env(kind, B, args.image_size, ignore_terminations=True)
    obs = env.reset()
    acts = random_actions(B, C, env.action_dim)
    env.chunk_step(acts)
    t_env = time_median(lambda: [env.chunk_step(acts) for _ in range(N)], args.repeats)
    state_dim = obs.states.shape[1] if obs.states is not None else 0
    action_dim = env.action_dim
    env.close()

    policy = calibrate_policy(obs, t_env / N, action_dim, C, state_dim)
    with torch.no_grad():
        t_policy = time_median(lambda: [policy.act(obs) for _ in range(N)], args.repeats)

    rows, results = [], {}
    for name, S, W in [("sequential (S=1)", 1, 0), ("pipelined S=2, env in threads", 2, 0), ("pipelined S=2, env in worker processes", 2, 1)]:
        t, parts = _rollout_time(_stage_envs(kind, B, S, W, args.image_size), policy, N, args.repeats)
        results[name] = t
        rows.append((name, f"{t:.3f}", f"{parts['policy']:.3f}", f"{parts['env_wait']:.3f}"))
    bound = max(t_env, t_policy)
    print(fmt_table([("env only", f"{t_env:.3f}", "", ""), ("policy only", f"{t_policy:.3f}", "", ""), *rows],
                    ("rollout of N chunk steps", "seconds", "policy s", "waiting for env s")))
    seq = results["sequential (S=1)"]
    print()
    print(f"sequential / (env + policy)                      = {seq / (t_env + t_policy):.2f}")
    for name in list(results)[1:]:
        t = results[name]
        print(f"{name:40s}: / max(env, policy) = {t / bound:.2f}, / sequential = {t / seq:.2f}")


if __name__ == "__main__":
    main()
