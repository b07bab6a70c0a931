"""Drift guard: every config from RLinf's guides carries the values of the upstream RLinf experiment it reproduces.

The table below is RLinf v0.3's ``examples/embodiment/config/*.yaml`` (with their ``env/`` and ``model/``
includes and the code defaults they fall back to) as RLinf's published runs effectively used them; e.g. Adam
eps 1e-8 / weight decay 0.01 are torch's AdamW defaults, which RLinf passed regardless of the YAML until
after RLinf's published runs. A deliberate difference is documented in docs/configs.md and left out of the table.
Change a value here only together with docs/configs.md.
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"

# RLinf's OpenVLA / OFT image path as its code runs it: `center_crop: True` in its YAMLs is passed to
# OpenVLAOFTConfig.from_pretrained and read by nothing (rlinf/models/embodiment/openvla_oft/rlinf/__init__.py:44-46;
# only the RoboTwin env crops), and its processor resizes tensors (prismatic/processing_prismatic.py:51)
RLINF_IMAGES = {"policy.center_crop": False, "policy.image_resize": "tensor"}
ADAM = {"optim.adam_eps": 1e-8, "optim.weight_decay": 0.01, "optim.adam_beta1": 0.9, "optim.adam_beta2": 0.999}
OFT_LIBERO_GRPO = {
    **RLINF_IMAGES,
    **ADAM,
    "optim.lr": 2e-5,
    "optim.clip_grad": 1.0,
    "global_batch_size": 16384,
    "micro_batch_size": 32,
    "total_envs": 64,
    "env.group_size": 8,
    "env.auto_reset": False,
    "env.max_episode_steps": 512,
    "env.reward_coef": 5.0,
    "env.settle_steps": 15,
    "env.settle_gripper": "neutral",
    "eval_env.settle_steps": 15,
    "rollout.max_steps_per_rollout_epoch": 512,
    "rollout.temperature_train": 1.6,
    "rollout.temperature_eval": 1.6,
    "algorithm.class_path": "GRPO",
    "algorithm.loss_agg": "trajectory_mean",
    "algorithm.filter_rewards": True,
    "algorithm.rewards_lower_bound": 0.5,
    "algorithm.rewards_upper_bound": 4.5,
    "algorithm.clip_ratio_low": 0.2,
    "algorithm.clip_ratio_high": 0.28,
    "algorithm.clip_ratio_c": 3.0,
    "algorithm.logprob_type": "token_level",
    "algorithm.reward_type": "action_level",
    "policy.attention_mode": "bidirectional",
    "policy.top_k": -1,
    "policy.is_lora": False,
    "policy.num_action_chunks": 8,
    "policy.max_prompt_length": 128,
}
OFT_LIBERO_PPO = {  # libero_10_ppo_openvlaoft.yaml, last shipped at 64a3f8b1c^
    **RLINF_IMAGES,
    **ADAM,
    "optim.lr": 5e-6,
    "optim.value_lr": 3e-3,
    "optim.clip_grad": 1.0,
    "global_batch_size": 1024,
    "micro_batch_size": 16,
    "total_envs": 64,
    "env.auto_reset": True,
    "env.max_episode_steps": 512,
    "env.reward_coef": 5.0,
    "env.settle_steps": 10,
    "env.settle_gripper": "neutral",
    "rollout.max_steps_per_rollout_epoch": 4096,
    "rollout.temperature_train": 1.0,
    "rollout.temperature_eval": 0.6,
    "algorithm.class_path": "PPO",
    "algorithm.loss_agg": "step_mean",
    "algorithm.gamma": 0.99,
    "algorithm.gae_lambda": 0.95,
    "algorithm.clip_ratio_low": 0.2,
    "algorithm.clip_ratio_high": 0.28,
    "algorithm.reward_type": "chunk_level",
    "policy.value_type": "chunk_level",
    "policy.attention_mode": "bidirectional",
    "policy.top_k": 50,
    "policy.is_lora": True,
    "policy.lora_rank": 32,
    "policy.max_prompt_length": 50,
}
MANISKILL = {
    **RLINF_IMAGES,
    **ADAM,
    "global_batch_size": 640,
    "env.max_episode_steps": 80,
    "env.reward_mode": "grasp",
    "env.relative_reward": True,
    "rollout.temperature_train": 1.0,
    "rollout.temperature_eval": 0.6,
    "policy.max_prompt_length": 30,
    "policy.unnorm_key": "bridge_orig",
    "env.image_size": [480, 640],
    "eval_env.image_size": [480, 640],
}
MANISKILL_TRAIN_RESETS = {"env.reset_with": "episode_id", "env.trials_per_task": 802816}  # randint over obj_set train
MANISKILL_GRPO = {
    **MANISKILL,
    **MANISKILL_TRAIN_RESETS,
    "total_envs": 256,
    "env.group_size": 8,
    "env.auto_reset": False,
    "rollout.max_steps_per_rollout_epoch": 80,
    "algorithm.class_path": "GRPO",
    "algorithm.loss_agg": "trajectory_mean",
    "algorithm.clip_ratio_high": 0.28,
    "algorithm.clip_ratio_low": 0.2,
    "micro_batch_size": 40,
}
MANISKILL_PPO = {
    **MANISKILL,
    **MANISKILL_TRAIN_RESETS,
    "total_envs": 128,
    "env.auto_reset": True,
    "rollout.max_steps_per_rollout_epoch": 160,
    "algorithm.class_path": "PPO",
    "algorithm.loss_agg": "step_mean",
    "optim.lr": 1e-4,
    "optim.value_lr": 3e-3,
    "optim.clip_grad": 10.0,
    "policy.is_lora": True,
    "policy.add_value_head": True,
    "policy.top_k": 0,
}
METAWORLD = {
    **RLINF_IMAGES,
    **ADAM,
    "optim.lr": 2e-5,
    "optim.clip_grad": 1.0,
    "global_batch_size": 12800,
    "micro_batch_size": 32,
    "total_envs": 64,
    "env.group_size": 8,
    "env.auto_reset": False,
    "env.max_episode_steps": 100,
    "env.reward_coef": 5.0,
    "env.camera_name": "corner4",
    "env.action_format": "7d",
    "env.image_size": 480,
    "eval_env.camera_name": "corner4",
    "env.settle_steps": 16,
    "eval_env.settle_steps": 16,
    "rollout.rollout_epoch": 16,
    "rollout.max_steps_per_rollout_epoch": 100,
    "rollout.temperature_train": 1.6,
    "rollout.temperature_eval": 0.6,
    "algorithm.class_path": "GRPO",
    "algorithm.loss_agg": "trajectory_mean",
    "algorithm.filter_rewards": True,
    "algorithm.rewards_lower_bound": 0.1,
    "algorithm.rewards_upper_bound": 1.0,
    "policy.num_action_chunks": 1,
    "policy.action_dim": 7,
    "policy.unnorm_key": "meta_world_strict",
    "policy.attention_mode": "bidirectional",
    "policy.top_k": -1,
}
OPENSORA = {  # opensora_libero_spatial_grpo_openvlaoft.yaml with env/opensora_libero_spatial + env/libero_spatial
    **RLINF_IMAGES,
    **ADAM,
    "optim.lr": 2e-5,
    "optim.clip_grad": 1.0,
    "global_batch_size": 8192,
    "micro_batch_size": 32,
    "total_envs": 64,
    "env.group_size": 8,
    "env.auto_reset": False,
    "env.max_episode_steps": 256,
    "env.reward_coef": 5.0,
    "env.use_rel_reward": True,
    "rollout.rollout_epoch": 16,
    "rollout.max_steps_per_rollout_epoch": 256,
    "rollout.temperature_train": 1.6,
    "rollout.temperature_eval": 1.6,
    "algorithm.class_path": "GRPO",
    "algorithm.filter_rewards": True,
    "algorithm.rewards_lower_bound": 0.5,
    "algorithm.rewards_upper_bound": 4.5,
    "algorithm.clip_ratio_low": 0.2,
    "algorithm.clip_ratio_high": 0.28,
    "policy.num_action_chunks": 8,
    "policy.use_proprio": False,
    "policy.num_images_in_input": 1,
    "policy.max_prompt_length": 128,
    "eval_env.max_episode_steps": 512,
    "eval_env.ignore_terminations": True,
    "eval_env.auto_reset": True,
    "eval_env.settle_steps": 15,
    "eval_env.settle_gripper": "neutral",
}
OPENPI_METAWORLD = {  # metaworld_50_ppo_openpi.yaml + model/pi0.yaml + env/metaworld_50.yaml
    "optim.adam_eps": 1e-8,
    "optim.weight_decay": 0.01,
    "optim.adam_beta1": 0.9,
    "optim.adam_beta2": 0.95,
    "optim.lr": 1e-5,
    "optim.value_lr": 1e-4,
    "optim.clip_grad": 1.0,
    "optim.critic_warmup_steps": 0,
    "global_batch_size": 2048,
    "micro_batch_size": 128,
    "total_envs": 64,
    "env.auto_reset": False,
    "env.ignore_terminations": False,
    "env.max_episode_steps": 100,
    "env.reward_coef": 1.0,
    "env.camera_name": "corner4",
    "env.action_format": "4d",
    "env.image_size": 480,
    "env.state_type": "proprio",
    "eval_env.camera_name": "corner4",
    "eval_env.ignore_terminations": True,
    "eval_env.auto_reset": True,
    "env.settle_steps": 16,
    "eval_env.settle_steps": 16,
    "rollout.rollout_epoch": 8,
    "rollout.max_steps_per_rollout_epoch": 100,
    "rollout.temperature_train": 1.0,
    "rollout.do_sample_eval": False,
    "algorithm.class_path": "PPO",
    "algorithm.update_epoch": 4,
    "algorithm.gamma": 0.99,
    "algorithm.gae_lambda": 0.95,
    "algorithm.value_clip": 0.2,
    "algorithm.huber_delta": 10.0,
    "algorithm.normalize_advantages": True,
    "algorithm.clip_ratio_low": 0.2,
    "algorithm.clip_ratio_high": 0.2,
    "algorithm.clip_ratio_c": 3.0,
    "algorithm.entropy_bonus": 0.0,
    "algorithm.reward_type": "chunk_level",
    "algorithm.logprob_type": "chunk_level",
    "algorithm.entropy_type": "token_level",
    "algorithm.loss_agg": "trajectory_mean",
    "policy.class_path": "OpenPIPolicy",
    "policy.num_action_chunks": 5,
    "policy.action_dim": 4,
    "policy.num_steps": 5,
    "policy.add_value_head": True,
    "policy.noise_method": "flow_sde",
    "policy.noise_level": 0.5,
    "policy.num_images_in_input": 1,
    "policy.train_expert_only": True,
    "policy.is_lora": False,
    "policy.asset_id": "lerobot/metaworld_mt50",
}
OOD = {
    **RLINF_IMAGES,
    "eval_env.max_episode_steps": 80,
    "eval_env.ignore_terminations": True,
    "eval_env.auto_reset": True,
    "rollout.do_sample_eval": True,
    "rollout.temperature_eval": 0.6,
    "policy.max_prompt_length": 30,
    "policy.top_k": 0,
    "eval_env.image_size": [480, 640],
}
LIBERO_130_EVAL = {
    **RLINF_IMAGES,
    "eval_env.max_episode_steps": 512,
    "eval_env.ignore_terminations": True,
    "eval_env.auto_reset": True,
    "eval_env.settle_steps": 15,
    "eval_env.settle_gripper": "neutral",
    "policy.unnorm_key": "libero_130_no_noops_trajall",
    "policy.attention_mode": "bidirectional",
    "policy.max_prompt_length": 128,
}
WAN_GRPO = {  # wan_libero_*_grpo_openvlaoft.yaml + env/wan_libero_*.yaml (YAML Adam eps: passed since RLinf #332)
    **RLINF_IMAGES,
    "optim.adam_eps": 1e-5,
    "optim.weight_decay": 0.01,
    "optim.adam_beta1": 0.9,
    "optim.adam_beta2": 0.999,
    "optim.lr": 2e-5,
    "optim.clip_grad": 1.0,
    "global_batch_size": 8192,
    "micro_batch_size": 32,
    "total_envs": 64,
    "env.class_path": "WorldModelEnv",
    "env.group_size": 8,
    "env.auto_reset": False,
    "env.max_episode_steps": 256,
    "env.reward_coef": 5.0,
    "env.use_rel_reward": True,
    "env.enable_kir": True,
    "eval_env.class_path": "LiberoEnv",
    "eval_env.max_episode_steps": 512,
    "eval_env.settle_gripper": "open",
    "rollout.rollout_epoch": 16,
    "rollout.max_steps_per_rollout_epoch": 256,
    "rollout.temperature_train": 1.6,
    "rollout.temperature_eval": 1.6,
    "algorithm.class_path": "GRPO",
    "algorithm.filter_rewards": True,
    "algorithm.rewards_lower_bound": 0.5,
    "algorithm.rewards_upper_bound": 4.5,
    "algorithm.clip_ratio_low": 0.2,
    "algorithm.clip_ratio_high": 0.28,
    "algorithm.clip_ratio_c": 3.0,
    "algorithm.logprob_type": "token_level",
    "algorithm.reward_type": "action_level",
    "policy.attention_mode": "bidirectional",
    "policy.top_k": -1,
    "policy.is_lora": False,
    "policy.num_action_chunks": 8,
    "policy.max_prompt_length": 128,
}
RL_EVAL = {"rollout.do_sample_eval": True, "rollout.temperature_eval": 1.6, "rollout.eval_rollout_epoch": 2}
SFT_EVAL = {"rollout.do_sample_eval": False, "rollout.eval_rollout_epoch": 1}

V03 = "examples/embodiment/config/"
UPSTREAM: dict[str, tuple[str, dict]] = {
    **{
        f"libero/{name}.yaml": (V03 + f"{up}_grpo_openvlaoft.yaml", {**OFT_LIBERO_GRPO, "rollout.rollout_epoch": 16})
        for name, up in (
            ("spatial", "libero_spatial"),
            ("object", "libero_object"),
            ("goal", "libero_goal"),
            ("libero_10", "libero_10"),
        )
    },
    "libero/libero_90.yaml": (
        V03 + "libero_90_grpo_openvlaoft.yaml",
        {**OFT_LIBERO_GRPO, "rollout.rollout_epoch": 64, "policy.unnorm_key": "libero_90_no_noops_trajall"},
    ),
    "libero/libero_130.yaml": (
        V03 + "libero_130_grpo_openvlaoft.yaml",
        {**OFT_LIBERO_GRPO, "rollout.rollout_epoch": 64, "policy.unnorm_key": "libero_130_no_noops_trajall"},
    ),
    **{
        f"libero/ppo_{s}.yaml": ("libero_10_ppo_openvlaoft.yaml", OFT_LIBERO_PPO)
        for s in ("spatial", "object", "goal", "libero_10")
    },
    "maniskill/maniskill_grpo_openvla.yaml": (
        V03 + "maniskill_grpo_openvla.yaml",
        {
            **MANISKILL_GRPO,
            "optim.lr": 1e-5,
            "optim.clip_grad": 1.0,
            "policy.is_lora": False,
            "policy.top_k": 50,
            "rollout.pipeline_stage_num": 2,
        },
    ),
    "maniskill/maniskill_grpo_openvlaoft.yaml": (
        V03 + "maniskill_grpo_openvlaoft.yaml",
        {
            **MANISKILL_GRPO,
            "optim.lr": 1e-4,
            "optim.clip_grad": 10.0,
            "policy.is_lora": True,
            "policy.top_k": 0,
            "policy.attention_mode": "bidirectional",
        },
    ),
    "maniskill/maniskill_ppo_openvla.yaml": (
        V03 + "maniskill_ppo_openvla.yaml",
        {
            **MANISKILL_PPO,
            "algorithm.clip_ratio_high": 0.2,
            "algorithm.logprob_type": "action_level",
            "rollout.pipeline_stage_num": 2,
        },
    ),
    "maniskill/maniskill_ppo_openvlaoft.yaml": (
        V03 + "maniskill_ppo_openvlaoft.yaml",
        {
            **MANISKILL_PPO,
            "micro_batch_size": 40,
            "algorithm.clip_ratio_high": 0.28,
            "algorithm.logprob_type": "token_level",
            "policy.attention_mode": "bidirectional",
        },
    ),
    **{
        f"wan/wan_libero_{s}_grpo_openvlaoft.yaml": (
            V03 + f"wan_libero_{s}_grpo_openvlaoft.yaml",
            {**WAN_GRPO, "policy.unnorm_key": f"libero_{s}_no_noops", "eval_env.task_suite_name": f"libero_{s}"},
        )
        for s in ("spatial", "object", "goal")
    },
    "metaworld/mt50_grpo_openvlaoft.yaml": (V03 + "metaworld_50_grpo_openvlaoft.yaml", METAWORLD),
    **{
        f"opensora/libero_{suite}_grpo_openvlaoft.yaml": (
            V03 + "opensora_libero_spatial_grpo_openvlaoft.yaml",
            {
                **OPENSORA,
                "policy.unnorm_key": f"libero_{suite}_no_noops",
                "eval_env.task_suite_name": f"libero_{suite}",
            },
        )
        for suite in ("spatial", "object")
    },
    "metaworld/ml45_grpo_openvlaoft.yaml": (V03 + "metaworld_50_grpo_openvlaoft.yaml", METAWORLD),
    "metaworld/mt50_ppo_openpi.yaml": (
        V03 + "metaworld_50_ppo_openpi.yaml",
        {**OPENPI_METAWORLD, "policy.detach_critic_input": True},
    ),
    "metaworld/mt50_ppo_openpi_pi05.yaml": (
        V03 + "metaworld_50_ppo_openpi_pi05.yaml",
        {
            **OPENPI_METAWORLD,
            "optim.lr": 5e-6,
            "optim.lr_scheduler": "cosine",
            "policy.value_after_vlm": True,
            "policy.value_vlm_mode": "mean_token",
            "policy.discrete_state_input": False,
        },
    ),
    "metaworld/ml45_ppo_openpi.yaml": (
        V03 + "metaworld_45_ppo_openpi.yaml",
        {**OPENPI_METAWORLD, "policy.detach_critic_input": True, "eval_env.max_episode_steps": 160},
    ),
    **{
        f"maniskill/maniskill_ood_{split}.yaml": (
            "evaluations/run_eval.sh",
            {**OOD, "eval_env.make_kwargs": {"obj_set": "test"}},
        )
        for split in ("vision", "semantic", "position")
    },
    **{
        f"maniskill/maniskill_ood_{split}_openvlaoft.yaml": (
            "evaluations/maniskill/maniskill_ood_openvlaoft_eval.yaml",
            {
                **OOD,
                "eval_env.make_kwargs": {"obj_set": "test"},
                "policy.attention_mode": "bidirectional",
                "policy.add_value_head": True,
                "policy.is_lora": True,
            },
        )
        for split in ("vision", "semantic", "position")
    },
    "maniskill/maniskill_ood.yaml": ("evaluations/run_eval.sh", {**OOD, "eval_env.make_kwargs": {"obj_set": "test"}}),
    "maniskill/maniskill_ood_openvlaoft.yaml": (
        "evaluations/maniskill/maniskill_ood_openvlaoft_eval.yaml",
        {
            **OOD,
            "eval_env.make_kwargs": {"obj_set": "test"},
            "policy.attention_mode": "bidirectional",
            "policy.add_value_head": True,
            "policy.is_lora": True,
        },
    ),
    "maniskill/maniskill_ood_semantic_train_objects.yaml": (
        "evaluations/run_eval.sh",
        {**OOD, "eval_env.make_kwargs": {"obj_set": "train"}},
    ),
    "maniskill/maniskill_ood_semantic_train_objects_openvlaoft.yaml": (
        "evaluations/run_eval.sh",
        {**OOD, "eval_env.make_kwargs": {"obj_set": "train"}, "policy.attention_mode": "bidirectional"},
    ),
    **{
        f"libero/eval/libero_130_{kind}_{suite}.yaml": (
            V03 + "libero_130_grpo_openvlaoft.yaml",
            {
                **LIBERO_130_EVAL,
                **(RL_EVAL if kind == "rl" else SFT_EVAL),
                "eval_env.task_suite_name": f"libero_{suite}" if suite in ("spatial", "object", "goal") else suite,
            },
        )
        for kind in ("rl", "sft")
        for suite in ("spatial", "object", "goal", "libero_10", "libero_90", "libero_130")
    },
}
# the SFT rows of RLinf's published world-model tables, evaluated in real LIBERO as upstream's env.eval of WM configs
WM_SFT_EVAL = {
    **RLINF_IMAGES,
    "eval_env.max_episode_steps": 512,
    "eval_env.ignore_terminations": True,
    "eval_env.auto_reset": True,
    "eval_env.settle_steps": 15,
    "rollout.eval_rollout_epoch": 1,
    "rollout.temperature_eval": 1.6,
    "policy.attention_mode": "bidirectional",
    "policy.max_prompt_length": 128,
    "policy.top_k": -1,
    "policy.num_action_chunks": 8,
    "policy.use_proprio": False,
    "policy.num_images_in_input": 1,
}
UPSTREAM.update(
    {
        f"libero/eval/{wm}_sft_{suite}.yaml": (
            V03 + f"{up}_grpo_openvlaoft.yaml",
            {
                **WM_SFT_EVAL,
                "eval_env.task_suite_name": f"libero_{suite}",
                "policy.unnorm_key": f"libero_{suite}_no_noops",
                "policy.model_path": f"/path/to/Openvla-oft-SFT-libero-{suite}-traj1",
                # OpenSora page: SFT greedy, reset_gripper_open false; Wan page: SFT sampled at T = 1.6, gripper open
                "rollout.do_sample_eval": wm == "wan",
                "eval_env.settle_gripper": "open" if wm == "wan" else "neutral",
            },
        )
        for wm, suites in (("opensora", ("spatial", "object")), ("wan", ("spatial", "object", "goal")))
        for suite in suites
        for up in ["opensora_libero_spatial" if wm == "opensora" else f"wan_libero_{suite}"]
    }
)
# configs that are not RLinf's published experiments: CPU smoke tests and the quickstart
NOT_SEEDS = {
    "libero/spatial_cpu_smoke.yaml",
    "maniskill/pickcube_cpu_smoke.yaml",
    "metaworld/quickstart_sft.yaml",
    "metaworld/quickstart_grpo.yaml",
    "opensora/cpu_smoke.yaml",
    "opensora/world_model_fit.yaml",
    "opensora/reward_model_fit.yaml",
    "metaworld/mt50_ppo_openpi_cpu_smoke.yaml",
    "wan/wan_cpu_smoke.yaml",
    "wan/wan_world_model_fit.yaml",
    "wan/wan_world_model_fit_cpu_smoke.yaml",
    # remote evals (RemotePolicy): RLinf evaluates no served policy; their grids follow openpi's LIBERO client and our
    # own eval configs (docs/remote_eval.md)
    "libero/eval/remote_spatial.yaml",
    "metaworld/remote_mt50.yaml",
    "maniskill/remote_ood_plate25.yaml",
}
SEED_DIRS = ("libero", "maniskill", "metaworld", "opensora", "wan")


def _load(rel: str) -> dict:
    return yaml.safe_load((CONFIGS / rel).read_text())


def _flat_keys(class_path: str | None) -> dict[str, tuple[str, str]]:
    """RLinf's flat policy / env key → (config group, field) of our class, for the classes with groups."""
    if class_path == "OpenPIPolicy":
        from rlinf_policy_openpi.settings import FLAT_KEYS
    elif class_path in ("OpenVLAPolicy", "OpenVLAOFTPolicy"):
        from rlinf_policy_openvla.settings import FLAT_KEYS
    elif class_path == "LiberoEnv":
        from rlinf_env_libero.settings import FLAT_KEYS
    elif class_path == "MetaWorldEnv":
        from rlinf_env_metaworld.settings import FLAT_KEYS
    elif class_path == "ManiSkillEnv":
        from rlinf_env_maniskill.settings import FLAT_KEYS
    else:
        return {}
    return FLAT_KEYS


def _value(cfg: dict, key: str):
    """Read ``key`` (``section.name``, ``total_envs`` or a top-level RLModule argument) from a config."""
    args = cfg["model"]["init_args"]
    if key == "total_envs":
        world = (cfg.get("memory") or {}).get("world_size") or cfg["trainer"].get("devices", 1)
        return args["env"]["init_args"]["num_envs"] * world
    section, _, name = key.partition(".")
    if not name:
        return args[section]
    block = args.get(section, {})
    if name == "class_path":
        return block.get("class_path")
    if name in _flat_keys(block.get("class_path")):
        group, name = _flat_keys(block.get("class_path"))[name]  # RLinf's flat name → our config group
        block = block.get("init_args", {}).get(group) or {}
    elif "class_path" in block:
        block = block.get("init_args", {})
    if name == "is_lora":  # RLinf's names for our policy's ``lora`` group
        return block.get("lora") is not None
    if name == "lora_rank":
        return (block.get("lora") or {}).get("rank", "<adapter's>")
    if name not in block:
        raise KeyError(f"{section} has no {name!r}")
    return block[name]


def _env_blocks(cfg: dict, class_path: str) -> list[tuple[str, dict]]:
    args = cfg["model"]["init_args"]
    return [(k, args[k].get("init_args", {})) for k in ("env", "eval_env")
            if isinstance(args.get(k), dict) and args[k].get("class_path") == class_path]  # fmt: skip


def _same(got, want) -> bool:
    return got == want or (isinstance(want, float) and isinstance(got, (int, float)) and abs(got - want) <= 1e-12)


def drift(rel: str, cfg: dict, text: str, docs: str) -> list[str]:
    """Every way the shipped config ``rel`` (parsed ``cfg``, raw ``text``) drifted from its row of ``UPSTREAM``:
    one line per key naming the config, the key, the shipped and the upstream value."""
    upstream_file, expected = UPSTREAM[rel]
    out = []
    for key, want in expected.items():
        try:
            got = _value(cfg, key)
        except KeyError:
            got = "<missing>"
        if not _same(got, want):
            out.append(f"{rel}: {key} = {got!r}, upstream {Path(upstream_file).name} has {want!r}")
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    name = Path(upstream_file).name
    if name.replace(".yaml", "") not in header.replace("\n# ", ""):
        out.append(f"{rel}: header does not name {name}")
    if f"`configs/{rel}`" not in docs:
        out.append(f"{rel}: docs/configs.md has no row for configs/{rel}")
    # LIBERO: RLinf seeds numpy per sub-env before each reset (fixture placement); MetaWorld: 15 + 1 zero-action
    # steps before the first frame. Every real-simulator env of a config from RLinf's guides does the same.
    for section, args in _env_blocks(cfg, "LiberoEnv"):
        seed = (args.get("sim") or {}).get("placement_seed")
        if seed != "rlinf":
            out.append(f"{rel}: {section}.sim.placement_seed = {seed!r}, needs 'rlinf'")
    for section, args in _env_blocks(cfg, "MetaWorldEnv"):
        settle = (args.get("sim") or {}).get("settle_steps")
        if settle != 16:
            out.append(f"{rel}: {section}.sim.settle_steps = {settle!r}, needs 16")
    return out


def test_no_shipped_config_drifted_from_upstream():
    """One table-driven check over every config from RLinf's guides: the failure lists each drifted config and key."""
    docs = (ROOT / "docs" / "configs.md").read_text()
    drifted = [line for rel in sorted(UPSTREAM)
               for line in drift(rel, _load(rel), (CONFIGS / rel).read_text(), docs)]  # fmt: skip
    assert not drifted, (
        "configs drifted from upstream RLinf (fix the config, or document the difference in "
        "docs/configs.md and update UPSTREAM):\n" + "\n".join(drifted)
    )


def test_the_drift_check_names_config_and_key():
    rel = "libero/spatial.yaml"
    cfg = _load(rel)
    cfg["model"]["init_args"]["optim"]["lr"] = 1e-3
    lines = drift(rel, cfg, (CONFIGS / rel).read_text(), f"`configs/{rel}`")
    assert lines == [f"{rel}: optim.lr = 0.001, upstream libero_spatial_grpo_openvlaoft.yaml has 2e-05"]


def test_every_seeds_config_is_in_the_table():
    shipped = {str(p.relative_to(CONFIGS)) for d in SEED_DIRS for p in (CONFIGS / d).rglob("*.yaml")}
    missing = sorted(shipped - set(UPSTREAM) - NOT_SEEDS)
    assert not missing, f"add the upstream values of {missing} to tests/test_config_fidelity.py and docs/configs.md"
