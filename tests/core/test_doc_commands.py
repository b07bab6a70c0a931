"""Every command in the bash blocks of docs/*.md runs as written, from a fresh checkout's root, or as a cheap
variant of it: the extra arguments in ``COMMANDS`` only shorten the run (fewer episodes, steps, epochs). A command
that cannot run here says why, naming the test that runs it instead or what it needs (a GPU, released weights, a
download). A block's ``# file: NAME`` files (docs/world_models.md's ``record.yaml``) are written out first, as the
doc asks the reader to. The README's commands: tests/core/test_readme_commands.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
GPU = "needs GPUs and the released weights"
QUICK_EVAL = [  # 4 held-out episodes of 24 steps instead of 40 of 100, no videos
    "--model.init_args.eval_env.init_args.trials_per_task=2",
    "--model.init_args.eval_env.init_args.num_envs=4",
    "--model.init_args.eval_env.init_args.max_episode_steps=24",
    "--model.init_args.eval_env.init_args.video_cfg.save_video=false",
    "--model.init_args.env.init_args.num_envs=8",
    "--model.init_args.rollout.env_workers=0",
]
ONE_EPOCH = ["--trainer.max_epochs=1", "--trainer.enable_progress_bar=false"]
# (doc, command) -> extra arguments of its cheap variant, or why it does not run here (a test file named in the
# reason must exist)
COMMANDS: dict[tuple[str, str], list[str] | str] = {
    (
        "quickstart.md",
        "bash scripts/install.sh rlinf-env-metaworld rlinf-policy-openvla",
    ): "installs packages: the install step of `bash scripts/quickstart.sh` (CI runs scripts/install.sh all)",
    (
        "quickstart.md",
        ".venv/bin/python scripts/quickstart_spread.py --jobs 2",
    ): "8 quickstart runs with 160-scene evals, about 1 h of CPU; tests/core/test_quickstart_spread.py checks its "
    "summary on synthetic runs and tests/test_quickstart.py runs the quickstart at toy scale",
    (
        "quickstart.md",
        ".venv/bin/python scripts/quickstart_spread.py --report-only",
    ): "summarises finished runs (a fresh checkout has none); tests/core/test_quickstart_spread.py checks the summary",
    (
        "coevolution.md",
        "rlinf coevolve --config toy/coevolve.yaml",
    ): "tests/core/test_coevolve.py runs the shipped toy loop (one round, fewer epochs)",
    (
        "coevolution.md",
        "rlinf coevolve --config toy/coevolve.yaml --rounds 3",
    ): "tests/core/test_coevolve.py resumes a finished toy loop and runs loops of 2 rounds",
    (
        "coevolution.md",
        "rlinf coevolve --config examples/metaworld_imagination/loop.yaml",
    ): "26 min on CPU (docs/imagination.md); tests/test_imagination_example.py loads the loop and parses its configs",
    (
        "imagination.md",
        "rlinf coevolve --config examples/metaworld_imagination/loop.yaml --out_dir runs/imagination",
    ): "26 min on CPU; tests/test_imagination_example.py loads the loop and parses its configs",
    (
        "imagination.md",
        "rlinf coevolve --config examples/metaworld_imagination/loop.yaml --out_dir runs/imagination --rounds 2",
    ): "26 min on CPU; tests/test_imagination_example.py loads the loop and parses its configs",
    (
        "imagination.md",
        'WM=\'{"model_path": "runs/imagination/round_1/world_model/run/version_0/world_model", '
        '"num_sampling_steps": 4}\'',
    ): "a shell variable of the next two commands",
    (
        "imagination.md",
        'rlinf wm-score actions --world_model OpenSoraWorldModel --world_model_args "$WM" '
        "--episodes HELD_OUT --start 32 48 --horizon 48 --chunk 8 --out actions.json",
    ): "needs the imagination loop's world model; tests/core/test_wm_scoring.py runs the command on the toy model",
    (
        "imagination.md",
        'rlinf wm-score reward --world_model OpenSoraWorldModel --world_model_args "$WM" '
        "--episodes HELD_OUT --start 32 48 --horizon 48 --chunk 8 --reward_model ResnetRewardModel "
        '--reward_model_args \'{"checkpoint": ".../resnet_rm.pth"}\' --threshold 0.5 '
        "--success_frames 2",
    ): "needs the imagination loop's models; tests/core/test_wm_scoring.py runs the command on the toy models",
    (
        "imagination.md",
        "rlinf wm-score rank --names sft step4 step8 step16 --real 0.23 0.30 0.41 0.45 --imagined 0.50 0.44 0.61 0.58",
    ): [],
    (
        "imagination.md",
        "bash scripts/gpu_check.sh --prepare-imagination",
    ): "downloads wheels and takes 30 min on CPU; tests/test_gpu_check_imagination.py prepares a tiny carry with it",
    (
        "imagination.md",
        "bash scripts/gpu_check.sh --dry-run --parts imagination",
    ): "tests/test_gpu_check_imagination.py runs the dry run (into tmp_path)",
    ("opensora.md", "pip install -e plugins/rlinf-wm-opensora"): "scripts/install.sh installs every plugin",
    (
        "opensora.md",
        "hf download RLinf/RLinf-OpenSora-LIBERO-Spatial --local-dir /path/to/RLinf-OpenSora-LIBERO-Spatial",
    ): "a download of released weights (tests run offline)",
    ("opensora.md", "rlinf fit --config opensora/libero_spatial_grpo_openvlaoft.yaml"): GPU,
    (
        "performance.md",
        "bash scripts/gpu_check.sh --dry-run --out /tmp/gpu-check",
    ): "tests/test_gpu_check.py runs the dry run (into tmp_path)",
    ("performance.md", "bash scripts/gpu_check.sh --prepare"): "downloads the wheels the GPU machine lacks",
    ("plugin_tutorial.md", "rlinf new env gridworld"): "tests/core/test_rlinf_new.py writes each kind and runs it",
    (
        "plugin_tutorial.md",
        "pip install -e './rlinf-env-gridworld[test]'",
    ): "tests/core/test_rlinf_new.py installs what rlinf new writes",
    (
        "plugin_tutorial.md",
        "pytest rlinf-env-gridworld/tests",
    ): "tests/core/test_rlinf_new.py runs the written package's kit",
    (
        "plugin_tutorial.md",
        "rlinf fit --config gridworld/ppo.yaml",
    ): "tests/core/test_rlinf_new.py trains each written kind",
    (
        "plugin_tutorial.md",
        "pip install ./rlinf-slide",
    ): "tests/core/test_plugin_tutorial.py installs the tutorial package",
    ("plugin_tutorial.md", "rlinf plugins"): [],
    ("plugin_tutorial.md", "pytest rlinf-slide/tests"): "tests/core/test_plugin_tutorial.py runs the package's tests",
    (
        "plugin_tutorial.md",
        "rlinf configs | grep slide",
    ): "tests/core/test_plugin_tutorial.py lists the package's configs",
    ("plugin_tutorial.md", "rlinf fit --config slide/grpo.yaml"): "tests/core/test_plugin_tutorial.py trains it",
    (
        "scaling.md",
        'torchrun --nnodes 2 --nproc-per-node 8 --node-rank "$NODE_RANK" --rdzv-backend c10d '
        '--rdzv-endpoint "$MASTER_ADDR:29500" -m rlinf_core.cli.main fit '
        "--config configs/libero/spatial.yaml "
        "--trainer.accelerator gpu --trainer.num_nodes 2 --trainer.devices 8 --trainer.strategy.class_path "
        "rlinf_core.distributed.strategies.FSDP2Strategy",
    ): "2 nodes of 8 GPUs; tests/scale/test_strategies_multiprocess.py runs FSDP2 on CPU ranks",
    ("scaling.md", "export OMP_NUM_THREADS=1 MUJOCO_GL=egl"): "environment of the SLURM job below",
    (
        "scaling.md",
        "srun rlinf fit --config configs/libero/spatial.yaml --trainer.accelerator gpu "
        "--trainer.num_nodes 2 --trainer.devices 8 --trainer.strategy.class_path "
        "rlinf_core.distributed.strategies.FSDP2Strategy --model.init_args.rollout.env_workers 8",
    ): "a 2-node SLURM job; tests/scale/test_strategies_multiprocess.py runs FSDP2 on CPU ranks",
    ("serving.md", "pip install -e 'core[serve]'"): "scripts/install.sh installs core[serve]",
    (
        "serving.md",
        "rlinf serve --policy runs/libero_spatial_grpo/version_0/policy --port 8000",
    ): "a LIBERO run's export; tests/serve/test_serve_loading.py serves a toy run's export until stopped",
    (
        "serving.md",
        "rlinf serve --policy runs/libero_spatial_grpo/version_0/checkpoints/last.ckpt",
    ): "a LIBERO run's checkpoint; tests/serve/test_serve_loading.py serves a toy run's checkpoint",
    (
        "serving.md",
        "rlinf serve --policy runs/libero_spatial_grpo/version_0",
    ): "a LIBERO run's directory; tests/serve/test_serve_loading.py loads a toy run's directory",
    (
        "serving.md",
        "rlinf serve --policy openvla-7b --protocol openvla --device cuda --precision bf16 --unnorm-key bridge_orig",
    ): GPU,
    (
        "serving.md",
        "rlinf validate --config libero/eval/remote_spatial.yaml --model.init_args.policy.init_args.url=ws://127.0.0.1:8000",
    ): "needs a policy server; tests/serve/test_remote_policy.py runs rlinf validate with RemotePolicy on rlinf serve",
    (
        "remote_eval.md",
        "rlinf serve --policy runs/libero_spatial_grpo/version_0/policy --host 0.0.0.0 --port 8000 --max-batch 16",
    ): "a LIBERO run's export on a GPU box; tests/serve/test_remote_policy.py serves a toy export with --max-batch",
    (
        "remote_eval.md",
        "rlinf validate --config libero/eval/remote_spatial.yaml --model.init_args.policy.init_args.url=ws://gpu-box:8000",
    ): "needs a policy server; tests/serve/test_remote_openpi_server.py evaluates LIBERO against openpi's server",
    (
        "remote_eval.md",
        "rlinf validate --config libero/eval/remote_spatial.yaml --model.init_args.policy.init_args.url="
        "ws://gpu-box:8000 --model.init_args.eval_env.init_args.task_suite_name=libero_10 "
        "--model.init_args.eval_env.init_args.max_episode_steps=520 "
        "--model.init_args.rollout.max_steps_per_rollout_epoch=520 --trainer.logger.init_args.name=pi05_libero_10",
    ): "needs openpi's pi0.5 served on a GPU; tests/serve/test_remote_openpi_server.py runs openpi's server on LIBERO",
    (
        "wan.md",
        "pip install -e plugins/rlinf-wm-wan -e plugins/rlinf-env-libero -e plugins/rlinf-policy-openvla",
    ): "scripts/install.sh installs every plugin",
    (
        "wan.md",
        "hf download RLinf/RLinf-Wan-LIBERO-Spatial --local-dir /path/to/RLinf-Wan-LIBERO-Spatial",
    ): "a download of released weights (tests run offline)",
    ("wan.md", "rlinf fit --config configs/wan/wan_libero_spatial_grpo_openvlaoft.yaml"): GPU,
    (
        "wan.md",
        "rlinf fit --config configs/wan/wan_world_model_fit.yaml --model.init_args.data_path runs/.../rollouts/train",
    ): "needs the released Wan weights; plugins/rlinf-wm-wan/tests/test_wan_world_model_fit.py fits its CPU variant",
    ("world_models.md", "rlinf validate --config metaworld/quickstart_grpo.yaml --config record.yaml"): QUICK_EVAL,
    (
        "world_models.md",
        "rlinf fit --config toy/world_model_fit.yaml --model.init_args.world_model.init_args."
        "action_dim=4 --model.init_args.data_path runs/metaworld_quickstart_grpo/version_0/rollouts/"
        "eval",
    ): ["--trainer.max_epochs=2", "--trainer.enable_progress_bar=false"],
    (
        "world_models.md",
        "rlinf fit --config toy/reward_model_fit.yaml --model.init_args.data_path "
        "runs/metaworld_quickstart_grpo/version_0/rollouts/eval",
    ): ONE_EPOCH,
}


def bash_blocks(doc: Path) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", doc.read_text(), re.S | re.M)


def doc_commands(doc: Path) -> list[str]:
    """The commands of ``doc``'s bash blocks: continuation lines joined, comments and blank lines dropped."""
    out = []
    for block in bash_blocks(doc):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip() if not line.lstrip().startswith("#") else ""
            if line:
                out.append(re.sub(r"\s+", " ", line))
    return out


def doc_files(doc: Path) -> dict[str, str]:
    """``{name: text}`` of the fenced blocks whose first line is ``# file: NAME``."""
    files = {}
    for block in re.findall(r"^```\w+\n(.*?)^```", doc.read_text(), re.S | re.M):
        first, _, body = block.partition("\n")
        if first.startswith("# file: "):
            files[first.removeprefix("# file: ").strip()] = body
    return files


ALL = [(doc.name, cmd) for doc in DOCS for cmd in doc_commands(doc)]


def test_every_doc_command_has_an_entry_here():
    assert len(ALL) >= 20, ALL
    missing = [c for c in ALL if c not in COMMANDS]
    assert not missing, f"add these commands to COMMANDS in {Path(__file__).name}: {missing}"
    stale = [c for c in COMMANDS if c not in ALL]
    assert not stale, f"no longer in the docs: {stale}"
    for (doc, cmd), why in COMMANDS.items():
        if isinstance(why, str):
            for test in re.findall(r"\S+\.py", why):
                assert (ROOT / test).is_file(), f"{doc}: `{cmd}` names {test}, which does not exist"


def run_doc(doc: str, tmp_path: Path, monkeypatch, capsys) -> list[str]:
    """Run ``doc``'s runnable commands in order in ``tmp_path`` (a checkout's root: configs/ linked, no runs/);
    the console output of each."""
    from rlinf_core.cli.main import main

    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    for name, text in doc_files(ROOT / "docs" / doc).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    outputs = []
    for command in doc_commands(ROOT / "docs" / doc):
        extra = COMMANDS[(doc, command)]
        if isinstance(extra, str):
            continue
        try:
            rc = main(shlex.split(command)[1:] + extra)
        except SystemExit as exc:
            rc = exc.code
        out = capsys.readouterr()
        assert rc in (0, None), f"docs/{doc}: `{command}` exited {rc}: {out.err[-1500:]}"
        outputs.append(out.out)
    return outputs


def test_cheap_doc_commands_run(tmp_path, monkeypatch, capsys):
    for doc in ("imagination.md", "plugin_tutorial.md"):
        (tmp_path / doc).mkdir()
        outputs = run_doc(doc, tmp_path / doc, monkeypatch, capsys)
        assert outputs and all(outputs)


@pytest.mark.slow
def test_world_models_recipe_runs_on_the_quickstart_layout(tmp_path, monkeypatch, capsys):
    """docs/world_models.md's record -> world model -> classifier recipe, as written, with a fresh tiny OFT where
    the quickstart's SFT export would be (the same layout: ``rlinf openvla-make-tiny`` is the quickstart's stage 1)."""
    pytest.importorskip("rlinf_env_metaworld")
    pytest.importorskip("rlinf_policy_openvla")
    from rlinf_policy_openvla.make_tiny import main as make_tiny

    make_tiny(
        [
            str(tmp_path / "outputs" / "quickstart" / "sft_policy"),
            "--kind",
            "oft",
            "--action-dim",
            "4",
            "--norm-key",
            "metaworld",
            "--proprio-dim",
            "4",
            "--num-action-chunks",
            "8",
        ]
    )
    capsys.readouterr()
    run_doc("world_models.md", tmp_path, monkeypatch, capsys)
    assert len(list((tmp_path / "runs/metaworld_quickstart_grpo/version_0/rollouts/eval").glob("traj*.npy"))) == 4
    assert (tmp_path / "runs/toy_world_model/version_0/world_model/config.json").is_file()
    assert (tmp_path / "runs/toy_reward_model/version_0/reward_model/resnet_rm.pth").is_file()
