"""The parts of benchmarks/gpu_check.py: each takes a :class:`Check` and returns its result dict (``rows``: one dict
of numbers per measured variant, the rest as notes). Released sizes on a GPU, tiny ones in a dry run."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
OFT_KIND = "openvla-oft-sft-libero"
# RLinf's published ManiSkill headline run (configs/maniskill/maniskill_ppo_openvlaoft.yaml): per GPU and RL step
HEADLINE = {"gpus": 8, "hours": 24.0, "num_envs": 128, "max_steps": 160, "chunks": 8}
GiB = 2**30


@dataclass
class Check:
    dry_run: bool
    device: torch.device
    out: Path
    env: str = "auto"
    card_gib: float | None = None
    results: dict[str, Any] = field(default_factory=dict)
    # rows a part has measured so far: kept in its result when it errors or runs out of time
    partial: dict[str, Any] = field(default_factory=dict)
    # the imagination part: its carry (None: .whl/imagination; a dry run prepares a tiny one), seconds
    imagination_carry: Path | None = None
    imagination_budget_s: float = 330.0
    imagination_train_s: float | None = None
    # writes the reports with the running part's rows so far (benchmarks/gpu_check.py sets it)
    report: Callable[[], None] = lambda: None
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rlinf-gpu-check-")))

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def progress(self, message: str) -> None:
        """One timestamped line on stdout, so that a run cut short shows where its time went."""
        print(f"gpu_check: {time.strftime('%H:%M:%S')} {message}", flush=True)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def reset_peak(self) -> int:
        if not self.cuda:
            return 0
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()

    def peak_gib(self) -> float | None:
        return torch.cuda.max_memory_allocated() / GiB if self.cuda else None


# ------------------------------------------------------------------ models
def randomize(module: torch.nn.Module) -> torch.nn.Module:
    """Every floating-point parameter drawn from N(0, 0.02²) in place (dtypes and devices kept)."""
    with torch.no_grad():
        for p in module.parameters():
            if p.is_floating_point():
                gen = torch.Generator(device=p.device).manual_seed(0)
                p.copy_(torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32).mul_(0.02))
    return module


def materialize(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """A meta-built module on ``device`` with random weights and float buffers drawn from U(0, 1) (no zero ranges
    such as an action statistic's q99 - q01), dtypes kept."""
    module.to_empty(device=device)
    with torch.no_grad():
        for b in module.buffers():
            if b.is_floating_point():
                b.uniform_()
    return randomize(module)


def oft_policy(
    check: Check, lora: bool, meta: bool, config: str = "configs/libero/spatial.yaml", layers: int | None = None
):
    """OpenVLA-OFT with the policy settings of a shipped GPU config (bf16 policy, gradient checkpointing) and the
    released architecture its ``model_path`` names (a weightless released-form directory); the tiny random one
    (make_tiny) in a dry run. ``meta``: built on the meta device (for the estimate); else on the device with the
    network's own random init and no weight load (as benchmarks/bench_gpu_openvla_realsize.py). ``layers``: the
    released architecture with that many Llama layers (``text_config.num_hidden_layers``)."""
    import yaml
    from jsonargparse import ArgumentParser

    import rlinf_policy_openvla._modeling as modeling
    from rlinf_core.models.meta import meta_init
    from rlinf_policy_openvla import OpenVLAOFTPolicy
    from rlinf_policy_openvla.released import RELEASED, write_released_dir

    node = yaml.safe_load((ROOT / config).read_text())["model"]["init_args"]["policy"]["init_args"]
    args = {**node, "lora": {"rank": 32} if lora else None}
    if check.dry_run:
        from rlinf_policy_openvla.make_tiny import make_tiny

        path, key = check.scratch / f"tiny-oft-{layers}", node["actions"]["unnorm_key"]
        if not path.exists():
            make_tiny(
                path,
                norm_keys=[key],
                action_dim=node["actions"].get("action_dim", 7),
                num_action_chunks=2,
                **({} if layers is None else {"num_layers": layers}),
            )
        args["actions"] = {**node["actions"], "num_action_chunks": 2}
    else:
        name = Path(node["model_path"]).name
        kind = next(k for k, spec in RELEASED.items() if any(r.split("/")[-1] == name for r in spec.repos))
        path = check.scratch / (kind if layers is None else f"{kind}-{layers}-layers")
        if not path.exists():
            write_released_dir(path, kind)
            if layers is not None:
                cfg = json.loads((path / "config.json").read_text())
                cfg["text_config"]["num_hidden_layers"] = layers
                (path / "config.json").write_text(json.dumps(cfg, indent=2))
    args["model_path"] = str(path)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OpenVLAOFTPolicy, "policy")
    parsed = parser.parse_object({"policy": args})
    if meta:
        with meta_init():
            return parser.instantiate(parsed).policy
    real_build, real_load = modeling.build_vla, OpenVLAOFTPolicy._load_weights
    modeling.build_vla = lambda spec, **kw: real_build(spec, **{**kw, "meta": False})
    OpenVLAOFTPolicy._load_weights = lambda self, vla, path, dtype: vla.to(dtype)
    try:
        with torch.device(check.device):
            return parser.instantiate(parsed).policy.to(check.device)
    finally:
        modeling.build_vla, OpenVLAOFTPolicy._load_weights = real_build, real_load


def observation(batch: int, size: int, device: torch.device, state_dim: int = 8, wrist: bool = False):
    from rlinf_core import Observation

    g = torch.Generator().manual_seed(0)
    return Observation(
        main_images=torch.randint(0, 256, (batch, size, size, 3), generator=g, dtype=torch.uint8),
        wrist_images=torch.randint(0, 256, (batch, size, size, 3), generator=g, dtype=torch.uint8) if wrist else None,
        task_descriptions=["put the black bowl on the plate"] * batch,
        states=torch.randn(batch, state_dim, generator=g),
    ).to(device)


def autocast(check: Check):
    return torch.autocast(check.device.type, torch.bfloat16)


def rl_step_memory(
    check: Check, policy, envs: int, chunks: int, micro: int, obs_size: int, state_dim: int = 8, wrist: bool = False
) -> dict:
    """Peak memory of a rollout (``chunks`` acts of ``envs``) and of an update (micro-batches of ``micro`` samples
    over the rollout's samples, one AdamW step), after a first update created the optimizer state."""
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-7)
    obs_mb = observation(micro, obs_size, check.device, state_dim, wrist)

    def update(n_micro: int) -> None:
        policy.train()
        for _ in range(n_micro):
            with torch.no_grad(), autocast(check):
                record = policy.act(obs_mb, do_sample=True, temperature=1.0).record
            with autocast(check):
                loss = -policy.evaluate(obs_mb, record, temperature=1.0).logprobs.float().mean()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    update(1)  # AdamW's state exists from here on, as in every RL step after the first
    obs = observation(envs, obs_size, check.device, state_dim, wrist)
    base = check.reset_peak()
    policy.eval()
    t0 = time.perf_counter()
    with torch.no_grad(), autocast(check):
        for _ in range(chunks):
            policy.act(obs, do_sample=True, temperature=1.0)
    check.sync()
    rollout_s, rollout_peak = time.perf_counter() - t0, check.peak_gib()
    check.reset_peak()
    t0 = time.perf_counter()
    update(max(1, min(2, envs * chunks // micro)))
    check.sync()
    return {
        "weights_and_state_gib": base / GiB if check.cuda else None,
        "rollout_peak_gib": rollout_peak,
        "update_peak_gib": check.peak_gib(),
        "rollout_s": rollout_s,
        "update_s": time.perf_counter() - t0,
    }


def estimate_for(policy_meta, envs: int, micro: int, steps: int, gpu_gib: float) -> Any:
    from rlinf_core.cli.memory import estimate_policy

    cfg = {
        "trainer": {"precision": "bf16-mixed", "devices": 1},
        "model": {
            "init_args": {
                "micro_batch_size": micro,
                "algorithm": {"class_path": "GRPO"},
                "env": {"init_args": {"num_envs": envs}},
                "rollout": {"max_steps_per_rollout_epoch": steps},
            }
        },
    }
    est, _ = estimate_policy(policy_meta, cfg, gpu_gib)
    return est


# ------------------------------------------------------------------ parts
def part_memory(check: Check) -> dict:
    envs, micro, chunks = (2, 2, 2) if check.dry_run else (8, 32, 4)
    gpu_gib = check.card_gib or (torch.cuda.get_device_properties(0).total_memory / GiB if check.cuda else 80.0)
    rows = {}
    for mode in ("lora", "full"):
        lora, layers = mode == "lora", None
        meta = oft_policy(check, lora=lora, meta=True)
        steps = chunks * meta.num_action_chunks
        est = estimate_for(meta, envs, micro, steps, gpu_gib)
        if est.peak > 0.9 * gpu_gib:
            # full fine-tuning of 7.5 B does not fit one card: the released architecture with fewer Llama layers
            # (the estimate is linear in the depth) checks the estimator on the same kind of stack
            depth = int(meta.model.text_config.num_hidden_layers)
            half = estimate_for(
                oft_policy(check, lora=lora, meta=True, layers=depth // 2), envs, micro, steps, gpu_gib
            ).peak
            per_layer = (est.peak - half) / (depth - depth // 2)
            if per_layer <= 0:
                raise RuntimeError(
                    f"the estimate does not grow with the Llama depth ({half:.2f} GiB at {depth // 2} "
                    f"layers, {est.peak:.2f} GiB at {depth})"
                )
            layers = max(1, min(depth - 1, int((0.8 * gpu_gib - (est.peak - per_layer * depth)) / per_layer)))
            rows[f"{mode} (released depth)"] = {
                "estimate_train_gib": est.train_total,
                "estimate_rollout_gib": est.rollout_total,
                "measured": f"not run: the estimate ({est.peak:.1f} GiB) exceeds this card ({gpu_gib:.0f} GiB)",
            }
            meta = oft_policy(check, lora=lora, meta=True, layers=layers)
            est = estimate_for(meta, envs, micro, steps, gpu_gib)
        row: dict[str, Any] = {
            "estimate_train_gib": est.train_total,
            "estimate_rollout_gib": est.rollout_total,
            "parameters": sum(p.numel() for p in meta.parameters()),
            "trainable": sum(p.numel() for p in meta.parameters() if p.requires_grad),
            "estimate_rows": {"train": est.train, "rollout": est.rollout},
        }
        del meta
        policy = oft_policy(check, lora=lora, meta=False, layers=layers)
        row.update(rl_step_memory(check, policy, envs, chunks, micro, 256))
        del policy
        if check.cuda:
            torch.cuda.empty_cache()
            row["train_ratio"] = row["update_peak_gib"] / est.train_total
            row["rollout_ratio"] = row["rollout_peak_gib"] / est.rollout_total
            row["within_10pct"] = abs(row["train_ratio"] - 1) <= 0.1 and abs(row["rollout_ratio"] - 1) <= 0.1
        rows[mode if layers is None else f"{mode} ({layers} Llama layers)"] = row
    return {"envs": envs, "micro_batch": micro, "chunks": chunks, "rows": rows}


class GpuUtilization:
    """Mean GPU utilisation (NVML through ``torch.cuda.utilization``) sampled every 0.2 s in a thread."""

    def __init__(self, enabled: bool) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True) if enabled else None

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.samples.append(float(torch.cuda.utilization()))
            except Exception:  # no NVML: utilisation unknown
                return

    def __enter__(self):
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


THROUGHPUT_CONFIGS = {
    "libero": "configs/libero/spatial.yaml",
    "metaworld": "configs/metaworld/mt50_grpo_openvlaoft.yaml",
}


def throughput_env_kind(requested: str) -> str:
    """``auto``: LIBERO where it is installed, else MetaWorld, else the toy ReachEnv."""
    import importlib.util

    if requested != "auto":
        return requested
    for kind, module in (("libero", "libero"), ("metaworld", "metaworld")):
        if importlib.util.find_spec(module) is not None:
            return kind
    return "reach"


def _throughput_env(check: Check, kind: str, num_envs: int, steps: int, stages: int):
    """The env and its worker processes per pipeline stage (``rollout.env_workers``)."""
    if kind == "reach":
        from rlinf_core.builtin.toy_env import ReachEnv

        return ReachEnv(num_envs=num_envs, group_size=2, max_episode_steps=steps, auto_reset=False), 0
    import yaml
    from jsonargparse import ArgumentParser

    from rlinf_core.plugins.manager import load_plugins

    node = yaml.safe_load((ROOT / THROUGHPUT_CONFIGS[kind]).read_text())["model"]["init_args"]["env"]
    cls = load_plugins(warn=False).resolve("env", node["class_path"])
    # worker processes per pipeline stage: the cores (two left to the trainer) shared by the stages, a divisor of
    # the stage's envs
    per_stage, cores = num_envs // stages, max(1, ((os.cpu_count() or 2) - 2) // stages)
    workers = 1 if check.dry_run else max(w for w in range(1, per_stage + 1) if per_stage % w == 0 and w <= cores)
    args = {
        **node["init_args"],
        "num_envs": num_envs,
        "group_size": 2,
        "max_episode_steps": steps,
        "auto_reset": False,
    }
    if check.dry_run:
        args["render"] = {**args.get("render", {}), "image_size": 64}
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "env")
    return parser.instantiate(parser.parse_object({"env": args})).env, workers


def part_throughput(check: Check) -> dict:
    import lightning.pytorch as pl

    import rlinf_core.rl.module as rl_module
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy
    from rlinf_core.rl.algorithms import GRPO
    from rlinf_core.rl.config import RolloutConfig
    from rlinf_core.rl.module import RLModule

    # a dry run uses the toy env unless --env names a simulator (then tiny sizes, one worker per stage)
    kind = "reach" if check.dry_run and check.env == "auto" else throughput_env_kind(check.env)
    envs, steps, micro = (4, 8, 4) if check.dry_run else (32, 64, 32)
    t0 = time.perf_counter()
    policy = (
        TinyVLAPolicy(action_dim=2, num_action_chunks=2)
        if kind == "reach"
        else oft_policy(check, lora=True, meta=False, config=THROUGHPUT_CONFIGS[kind])
    )
    check.partial["setup"] = {"build_policy_s": time.perf_counter() - t0}
    check.progress(f"throughput: policy built in {check.partial['setup']['build_policy_s']:.1f} s ({kind} env)")
    recompute_s: list[float] = []
    real_recompute = rl_module.recompute_old_logprobs

    def timed_recompute(*args, **kw):
        t0 = time.perf_counter()
        try:
            return real_recompute(*args, **kw)
        finally:
            check.sync()
            recompute_s.append(time.perf_counter() - t0)

    rows = {}
    rl_module.recompute_old_logprobs = timed_recompute
    try:
        for stages in (1, 2):
            metrics: list[dict] = []

            class Record(pl.Callback):  # the module logs time/step after the callbacks' on_train_epoch_end
                def on_train_epoch_start(self, trainer, module) -> None:
                    if module.step_metrics:
                        self.record(module)
                    check.progress(f"throughput: stages={stages}, RL step {trainer.current_epoch + 1} starts")

                def on_train_end(self, trainer, module) -> None:
                    self.record(module)

                def record(self, module) -> None:
                    metrics.append(dict(module.step_metrics))
                    times = {k: round(float(v), 2) for k, v in metrics[-1].items() if k.startswith("time/")}
                    check.partial[f"stages={stages}, RL step {len(metrics)}"] = times
                    check.progress(f"throughput: stages={stages}, RL step {len(metrics)} {times}")

            t0 = time.perf_counter()
            env, workers = _throughput_env(check, kind, envs, steps, stages)
            check.progress(f"throughput: stages={stages}: env built in {time.perf_counter() - t0:.1f} s")
            module = RLModule(
                env=env,
                policy=policy,
                algorithm=GRPO(update_epoch=1),
                rollout=RolloutConfig(
                    max_steps_per_rollout_epoch=steps,
                    pipeline_stage_num=stages,
                    env_workers=workers,
                    recompute_logprobs=True,
                    show_progress=False,
                ),
                global_batch_size=envs * steps // policy.num_action_chunks,
                micro_batch_size=micro,
                export_policy=False,
            )
            trainer = pl.Trainer(
                max_epochs=2,
                accelerator="gpu" if check.cuda else "cpu",
                devices=1,
                precision="bf16-mixed",
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                num_sanity_val_steps=0,
                limit_val_batches=0,
                default_root_dir=str(check.scratch / f"fit-{stages}"),
                callbacks=[Record()],
            )
            recompute_s.clear()
            with GpuUtilization(check.cuda) as util:
                trainer.fit(module)
            last = metrics[-1]  # the second RL step: kernels, workers and allocator warm
            step_s, rollout_s = last["time/step"], last["time/rollout"]
            rec = recompute_s[-1] if recompute_s else 0.0
            rows[f"stages={stages}"] = check.partial[f"stages={stages}"] = {
                "env_steps_per_s": envs * steps / rollout_s,
                "gpu_util_pct": util.mean,
                "step_s": step_s,
                "rollout_s": rollout_s,
                "recompute_s": rec,
                "update_s": step_s - rollout_s - rec - last.get("time/advantages", 0.0),
            }
    finally:
        rl_module.recompute_old_logprobs = real_recompute
    best = max(rows.values(), key=lambda r: r["env_steps_per_s"])
    per_step = HEADLINE["num_envs"] * HEADLINE["max_steps"]
    samples = per_step // HEADLINE["chunks"]
    update_per_sample = (best["update_s"] + best["recompute_s"]) / (envs * steps // policy.num_action_chunks)
    rl_step_s = per_step / best["env_steps_per_s"] + samples * update_per_sample
    projection = {
        "rl_step_s": rl_step_s,
        "rl_steps_in_24h": HEADLINE["hours"] * 3600 / rl_step_s,
        "assumes": "the headline config's 128 envs x 160 steps per GPU per RL step at this run's per-GPU env steps/s "
        "and update s/sample (CPU simulators here; ManiSkill's GPU simulator differs)",
    }
    return {"env": kind, "envs": envs, "steps": steps, "rows": rows, "projection": projection}


def part_precisions(check: Check) -> dict:
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.precision import MixedPrecision

    from rlinf_core.builtin.toy_env import ReachEnv
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy
    from rlinf_core.rl.algorithms import GRPO
    from rlinf_core.rl.config import OptimConfig, RolloutConfig
    from rlinf_core.rl.module import RLModule

    # tests/core/test_rl_loop.py::test_grpo_learns_on_reach_env's setup (about 30 % initial success)
    epochs, envs, steps = (2, 8, 4) if check.dry_run else (30, 64, 12)
    rows = {}
    for precision in ("bf16-mixed", "16-mixed", "32-true"):
        torch.manual_seed(0)
        module = RLModule(
            env=ReachEnv(
                num_envs=envs, group_size=8, max_episode_steps=steps, auto_reset=False, step_size=0.15, radius=0.15
            ),
            policy=TinyVLAPolicy(action_dim=2, num_action_chunks=2),
            algorithm=GRPO(update_epoch=1 if check.dry_run else 4, clip_ratio_high=0.28),
            rollout=RolloutConfig(max_steps_per_rollout_epoch=steps, recompute_logprobs=True, show_progress=False),
            optim=OptimConfig(lr=1e-2, clip_grad=1.0),
            global_batch_size=envs * steps // 4,
            micro_batch_size=envs * steps // 4,
            export_policy=False,
        )
        metrics: list[dict] = []

        class Record(pl.Callback):
            def on_train_epoch_end(self, trainer, module) -> None:
                metrics.append(dict(module.step_metrics))

        # on CPU Lightning turns the 16-mixed flag into bf16-mixed: the plugin object keeps fp16 + GradScaler
        flag = (
            {"plugins": [MixedPrecision("16-mixed", "cpu")]}
            if precision == "16-mixed" and not check.cuda
            else {"precision": precision}
        )
        trainer = pl.Trainer(
            max_epochs=epochs,
            accelerator="gpu" if check.cuda else "cpu",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            callbacks=[Record()],
            default_root_dir=str(check.scratch / f"precision-{precision}"),
            **flag,
        )
        trainer.fit(module)
        success = [m.get("env/success_once", float("nan")) for m in metrics]
        k = min(5, len(success))
        start, end = sum(success[:k]) / k, sum(success[-k:]) / k
        rows[precision] = {
            "success_first5": start,
            "success_last5": end,
            "learned": end > start + 0.2,
            "max_logprob_mismatch": max(m.get("rollout/logprob_mismatch", math.nan) for m in metrics),
            "skipped_steps": module.skipped_steps,
        }
    return {"epochs": epochs, "rows": rows}


def part_openpi(check: Check) -> dict:
    from rlinf_policy_openpi.policy import OpenPIPolicy

    batches = [1, 2] if check.dry_run else [1, 8, 32]
    rows = {}
    for name, pi05 in (("pi0", False), ("pi05", True)):
        if check.dry_run:
            from rlinf_policy_openpi.testing import tiny_checkpoint

            path, size, state_dim = tiny_checkpoint(pi05=pi05, layout="rlinf"), 64, 4
        else:
            from rlinf_policy_openpi.released import write_released_dir

            kind = "RLinf-Pi05-LIBERO-SFT" if pi05 else "RLinf-Pi0-LIBERO-Spatial-Object-Goal-SFT"
            path, size, state_dim = write_released_dir(check.scratch / kind, kind), 224, 8
        with torch.device(check.device):  # the real load (a released directory's sparse file reads as zeros)
            policy = OpenPIPolicy(str(path), precision="bf16", gradient_checkpointing=True).to(check.device)
        randomize(policy)
        row: dict[str, Any] = {
            "parameters": sum(p.numel() for p in policy.parameters()),
            "trainable": sum(p.numel() for p in policy.parameters() if p.requires_grad),
        }
        row.update(
            rl_step_memory(
                check,
                policy,
                envs=batches[-1],
                chunks=1,
                micro=batches[-1],
                obs_size=size,
                state_dim=state_dim,
                wrist=True,
            )
        )
        policy.eval()
        for b in batches:
            obs = observation(b, size, check.device, state_dim, wrist=True)
            with torch.no_grad(), autocast(check):
                policy.act(obs)
                check.sync()
                t0 = time.perf_counter()
                for _ in range(3):
                    policy.act(obs)
                check.sync()
            row[f"act_ms_b{b}"] = (time.perf_counter() - t0) / 3 * 1e3
        rows[name] = row
        del policy
        if check.cuda:
            torch.cuda.empty_cache()
    return {"batches": batches, "rows": rows}


def part_opensora(check: Check) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_opensora import measure
    from rlinf_core.models.meta import meta_init
    from rlinf_wm_opensora.world_model import OpenSoraWorldModel

    if check.dry_run:
        from rlinf_wm_opensora.make_tiny import write_tiny

        path, counts, steps = write_tiny(check.scratch / "tiny-opensora"), [1, 2], 2
    else:  # a path that does not exist: the released architecture (rlinf_wm_opensora.released)
        path, counts, steps = check.scratch / "RLinf-OpenSora-LIBERO-Spatial", [1, 4, 16], 10
    with meta_init():
        model = OpenSoraWorldModel(str(path), num_sampling_steps=steps)
    materialize(model, check.device)
    model = model.eval().to(check.device)
    rows = {}
    for n in counts:
        check.reset_peak()
        fps = measure(model, n, 1 if check.dry_run else 2, check.device)
        rows[f"envs={n}"] = {"frames_per_s": fps, "peak_gib": check.peak_gib()}
    return {"image_size": model.image_size, "parameters": sum(p.numel() for p in model.parameters()), "rows": rows}


def part_imagination(check: Check) -> dict:
    from gpu_check_imagination import part_imagination as run

    return run(check)


FUNCTIONS = {
    "imagination": part_imagination,
    "memory": part_memory,
    "throughput": part_throughput,
    "precisions": part_precisions,
    "openpi": part_openpi,
    "opensora": part_opensora,
}
