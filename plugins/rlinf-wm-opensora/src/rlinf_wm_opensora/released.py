"""The released architecture (``RLinf/RLinf-OpenSora-LIBERO-*``): what a meta build uses when no directory exists.

``rlinf memory`` and config checks build the world model on the meta device from a config whose ``model_path`` is
a placeholder; these are the released ``config.json`` (STDiT3-XL/2 with the action embedder, 256² frames) and
``vae/config.json`` (``stabilityai/sdxl-vae``).
"""

RELEASED_CONFIG = {
    "input_size": [12, 32, 32],
    "input_sq_size": 512,
    "in_channels": 4,
    "patch_size": [1, 2, 2],
    "hidden_size": 1152,
    "depth": 28,
    "num_heads": 16,
    "mlp_ratio": 4.0,
    "class_dropout_prob": 0.1,
    "pred_sigma": True,
    "drop_path": 0.0,
    "caption_channels": 4096,
    "model_max_length": 300,
    "qk_norm": True,
    "skip_y_embedder": False,
    "action_dim": 7,
    "pad_action_num": 4,
    "image_size": 256,
}
SDXL_VAE_CONFIG = {
    "_class_name": "AutoencoderKL",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "in_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 1024,
    "scaling_factor": 0.13025,
}
