"""The quickstart's SFT stage from its own demos and from LeRobot copies of them: held-out success of each.

    python benchmarks/bench_lerobot_quickstart_sft.py [--out DIR] [--seed 0] [--sft-epochs 40]

Makes the tiny OpenVLA-OFT and collects the quickstart demos (scripts/quickstart.py's settings), copies them with
``rlinf_core.lerobot.demos_to_lerobot`` as PNG frames (lossless) and as H.264 video, SFTs once per source (native
``data_path``; the PNG copy as a LeRobot ``data_path``; the H.264 copy through ``data: {class_path: LeRobotDemos}``)
with the same seed, and evaluates each on the held-out scenes. Prints one line per source.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from quickstart import CONFIGS, TASKS, Runner, eval_results  # noqa: E402

from rlinf_core.lerobot.convert import demos_to_lerobot  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "outputs" / "lerobot_quickstart_sft"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sft-epochs", type=int, default=40)
    p.add_argument("--eval-trials", type=int, default=20)
    args = p.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    run = Runner(out)
    py, rlinf = sys.executable, str(run.bin / "rlinf")
    run("make tiny OpenVLA-OFT", [py, "-m", "rlinf_policy_openvla.make_tiny", str(out / "tiny_oft"), "--kind", "oft",
                                  "--norm-key", "metaworld", "--action-dim", "4", "--proprio-dim", "4",
                                  "--num-action-chunks", "8"])  # fmt: skip
    run("collect demos", [py, "-m", "rlinf_env_metaworld.collect", "--tasks", *TASKS, "--episodes-per-task", "3",
                          "--trial-seed", "0", "--out", str(out / "demos"), "--image-size", "64", "--camera-name",
                          "corner", "--num-action-chunks", "8", "--quiet", "--overwrite"])  # fmt: skip
    demos_to_lerobot(out / "demos", out / "lerobot_png", video=False, overwrite=True)
    demos_to_lerobot(out / "demos", out / "lerobot_h264", video=True, overwrite=True)
    sources = {
        "native rlinf-demos": [f"--model.init_args.data_path={out / 'demos'}"],
        "LeRobot copy, PNG frames (data_path)": [f"--model.init_args.data_path={out / 'lerobot_png'}"],
        "LeRobot copy, H.264 video (data: LeRobotDemos)": [
            "--model.init_args.data_path=null", "--model.init_args.data.class_path=LeRobotDemos",
            f"--model.init_args.data.init_args.root={out / 'lerobot_h264'}"],
    }  # fmt: skip
    tasks_yaml = "[" + ",".join(TASKS) + "]"
    lines = []
    for i, (name, data_args) in enumerate(sources.items()):
        policy, tb = out / f"sft_policy_{i}", out / "tensorboard"
        run(f"SFT {i}", [rlinf, "fit", "--config", str(CONFIGS / "quickstart_sft.yaml"),
                         f"--model.init_args.policy.init_args.model_path={out / 'tiny_oft'}", *data_args,
                         f"--model.init_args.export_dir={policy}", f"--trainer.max_epochs={args.sft_epochs}",
                         f"--trainer.logger.init_args.save_dir={tb}", f"--trainer.logger.init_args.name=sft_{i}",
                         "--trainer.logger.init_args.version=0", f"--seed_everything={args.seed}"])  # fmt: skip
        run(f"eval {i}", [rlinf, "validate", "--config", str(CONFIGS / "quickstart_grpo.yaml"),
                          f"--model.init_args.eval_env.init_args.tasks={tasks_yaml}",
                          f"--model.init_args.env.init_args.tasks={tasks_yaml}",
                          f"--model.init_args.eval_env.init_args.trials_per_task={args.eval_trials}",
                          f"--model.init_args.policy.init_args.model_path={policy}",
                          f"--trainer.logger.init_args.save_dir={tb}", f"--trainer.logger.init_args.name=eval_{i}",
                          "--trainer.logger.init_args.version=0", f"--seed_everything={args.seed}",
                          "--model.init_args.eval_env.init_args.video_cfg.save_video=false"])  # fmt: skip
        res = eval_results(tb / f"eval_{i}" / "version_0")[-1]
        per_task = " / ".join(f"{100 * res['per_task'][t]['success_once']:.1f}" for t in TASKS)
        lines.append(f"{name}: held-out success {100 * res['metrics']['eval/success_once']:.1f} % ({per_task} %)")
        print(lines[-1], flush=True)
    print("\n".join(["", f"seed {args.seed}, {args.sft_epochs} SFT epochs, tasks {', '.join(TASKS)}:", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
