"""Write ``openpi_pi0/`` and ``openpi_pi05/``: tiny π0 / π0.5 checkpoints saved the way openpi's PyTorch code saves
them (see README.md beside this file). Two steps, each in the environment that has the writer:

    # 1. the statistics, with openpi's own writer (openpi.shared.normalize: RunningStats + save), in a venv with
    #    numpy, pydantic and numpydantic and openpi's src/ on the path
    PYTHONPATH=<openpi checkout>/src /tmp/openpi-venv/bin/python tests/upstream_corpus/make_openpi.py norm-stats
    # 2. the weights, with safetensors.torch.save_model (as openpi's convert_jax_model_to_pytorch.py and
    #    scripts/train_pytorch.py call it), in this project's venv
    .venv/bin/python tests/upstream_corpus/make_openpi.py weights
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = {"openpi_pi0": False, "openpi_pi05": True}
ASSET_ID = "tiny/metaworld"  # an asset id with a slash, as openpi's (e.g. "physical-intelligence/libero")
STATE_DIM, ACTION_DIM = 4, 4
SEED = 0


def write_norm_stats() -> None:
    import numpy as np
    from openpi.shared import normalize  # openpi's own statistics and writer

    rng = np.random.default_rng(SEED)
    for name in VARIANTS:
        stats = {}
        for key, dim in (("state", STATE_DIM), ("actions", ACTION_DIM)):
            running = normalize.RunningStats()
            for _ in range(4):
                running.update(rng.normal(0.2, 0.7, size=(64, dim)).astype(np.float32))
            stats[key] = running.get_statistics()
        normalize.save(HERE / name / "assets" / ASSET_ID, stats)


def write_weights() -> None:
    import safetensors.torch
    import torch

    from rlinf_policy_openpi._gemma_layers import AdaRMSNorm
    from rlinf_policy_openpi._modeling import OpenPIModel
    from rlinf_policy_openpi.make_tiny import build_tokenizer, tiny_config

    for name, pi05 in VARIANTS.items():
        out = HERE / name
        out.mkdir(parents=True, exist_ok=True)
        config = tiny_config(pi05, build_tokenizer(out), action_horizon=5, depth=1, image_size=28)
        torch.manual_seed(SEED)
        model = OpenPIModel(config)  # openpi's parameter names, lm_head tied to embed_tokens as in PaliGemma
        for module in model.modules():
            if isinstance(module, AdaRMSNorm):
                torch.nn.init.normal_(module.dense.weight, std=0.02)
        model = model.to(torch.float32)  # convert_jax_model_to_pytorch.py --precision float32
        safetensors.torch.save_model(model, str(out / "model.safetensors"))
        # convert_jax_model_to_pytorch.py's config.json; "dims"/"vocab_size" size the tiny stacks (openpi's
        # variants name only full-size ones)
        (out / "config.json").write_text(json.dumps(config.to_json(), indent=2))


if __name__ == "__main__":
    {"norm-stats": write_norm_stats, "weights": write_weights}[sys.argv[1]]()
