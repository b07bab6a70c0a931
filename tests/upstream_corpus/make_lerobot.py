"""Write ``lerobot_pi0/`` and ``lerobot_pi05/``: what huggingface/lerobot 0.4.4 saves for a π0 / π0.5 policy (see
README.md beside this file): ``PI0Policy(config).save_pretrained(dir)`` / ``PI05Policy`` (lerobot's
``PreTrainedPolicy._save_pretrained``: ``config.json`` by draccus, ``model.safetensors`` by
``safetensors.torch.save_model``) and, as ``lerobot-train`` saves a checkpoint, the pre- / post-processor pipelines of
``make_pi0_pre_post_processors`` / ``make_pi05_pre_post_processors`` with ``save_pretrained(dir)`` (the normalizer
statistics in ``policy_preprocessor_step_*_normalizer_processor.safetensors``).

    /tmp/lerobot-venv/bin/python tests/upstream_corpus/make_lerobot.py

run in lerobot's own venv (lerobot 0.4.4, see tests/fixtures/lerobot/README.md) with, on ``PYTHONPATH``, the
transformers lerobot's π0 checks for: 4.53.2 with Physical-Intelligence/openpi's
``src/openpi/models_pytorch/transformers_replace`` copied over it (lerobot's ``fix/lerobot_openpi`` branch is not on
PyPI; its guard, ``transformers.models.siglip.check``, is openpi's file and asks for exactly that). lerobot builds
only full-size models, so these patches shrink it before ``PI0Policy(config)`` builds (lerobot's code is unchanged):

- lerobot's ``get_gemma_config`` also answers openpi's ``"dummy"`` variant (openpi ``gemma.py:get_config("dummy")``:
  width 64, depth 4, MLP 128, 8 heads, 1 KV head, head dim 16); the config's variants are set to ``"dummy"`` after
  its ``__post_init__``, which accepts only ``gemma_300m`` / ``gemma_2b``;
- ``PaliGemmaForConditionalGeneration`` / ``GemmaForCausalLM`` as lerobot's modeling module names them get their
  config with the vocabulary cut to 320 and a SigLIP of width 32, depth 2, MLP 64, 2 heads, at 28 px (lerobot
  hard-codes 257152 and So400m); the projector's ``projection_dim`` is the VLM width, as lerobot's 2048 is
  gemma_2b's;
- the processor's ``TokenizerProcessorStep`` would download ``google/paligemma-3b-pt-224``; it gets a stand-in (the
  saved pipeline records only the tokenizer's name).

``lerobot_pi0{,5}_reference.safetensors`` (beside the directory: rlinf, like RLinf, reads every ``*.safetensors`` in
it as weights): inputs, noise and the output of lerobot's own ``PI0Pytorch`` / ``PI05Pytorch``
``sample_actions`` (3 Euler steps) on the saved weights, after lerobot's ``to_bfloat16_for_selected_params("float32")``
(the weights are saved in bfloat16, ``dtype: bfloat16``; the reference is computed in float32).
"""

from __future__ import annotations

import shutil
import types
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
VOCAB = 320
VISION = {"hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64, "num_attention_heads": 2}
IMAGE = 28
DUMMY = {"width": 64, "depth": 4, "mlp_dim": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16}


def _shrunk(modeling):
    """Patches of ``modeling`` (lerobot's modeling_pi0 / modeling_pi05) that build the tiny model."""
    real_gemma, real_paligemma, real_expert = (
        modeling.get_gemma_config,
        modeling.PaliGemmaForConditionalGeneration,
        modeling.GemmaForCausalLM,
    )

    def get_gemma_config(variant):
        return modeling.GemmaConfig(**DUMMY) if variant == "dummy" else real_gemma(variant)

    def paligemma(config):
        config.text_config.vocab_size = VOCAB
        for key, value in VISION.items():
            setattr(config.vision_config, key, value)
        config.vision_config.projection_dim = config.text_config.hidden_size
        return real_paligemma(config=config)

    def expert(config):
        config.vocab_size = VOCAB
        return real_expert(config=config)

    return mock.patch.multiple(
        modeling,
        get_gemma_config=get_gemma_config,
        PaliGemmaForConditionalGeneration=paligemma,
        GemmaForCausalLM=expert,
    )


def _stats(torch, dim: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    mean, std = torch.randn(dim, generator=gen), torch.rand(dim, generator=gen) + 0.5
    return {
        "mean": mean,
        "std": std,
        "min": mean - 3 * std,
        "max": mean + 3 * std,
        "q01": mean - 2 * std,
        "q99": mean + 2 * std,
    }


def write(kind: str, out: Path) -> None:
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.processor import tokenizer_processor

    if kind == "pi0":
        from lerobot.policies.pi0 import modeling_pi0 as modeling
        from lerobot.policies.pi0.configuration_pi0 import PI0Config as Config
        from lerobot.policies.pi0.processor_pi0 import make_pi0_pre_post_processors as processors
    else:
        from lerobot.policies.pi05 import modeling_pi05 as modeling
        from lerobot.policies.pi05.configuration_pi05 import PI05Config as Config
        from lerobot.policies.pi05.processor_pi05 import make_pi05_pre_post_processors as processors

    config = Config(
        chunk_size=5,
        n_action_steps=5,
        image_resolution=(IMAGE, IMAGE),
        dtype="bfloat16",
        device="cpu",
        input_features={
            "observation.images.base_0_rgb": PolicyFeature(type=FeatureType.VISUAL, shape=(3, IMAGE, IMAGE)),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(4,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(4,))},
    )
    config.paligemma_variant = config.action_expert_variant = "dummy"
    torch.manual_seed(0)
    with _shrunk(modeling):
        policy = modeling.PI0Policy(config) if kind == "pi0" else modeling.PI05Policy(config)
    shutil.rmtree(out, ignore_errors=True)
    policy.save_pretrained(out)
    stats = {"observation.state": _stats(torch, 4, 1), "action": _stats(torch, 4, 2)}
    stand_in = types.SimpleNamespace(from_pretrained=lambda name, **kwargs: types.SimpleNamespace(name=name))
    with mock.patch.object(tokenizer_processor, "AutoTokenizer", stand_in):
        preprocessor, postprocessor = processors(config, dataset_stats=stats)
    preprocessor.save_pretrained(out)
    postprocessor.save_pretrained(out)
    _reference(torch, policy.model, kind, out)


def _reference(torch, model, kind: str, out: Path) -> None:
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(1)
    inputs = {
        "image": torch.rand(2, 3, IMAGE, IMAGE, generator=gen) * 2 - 1,
        "image_mask": torch.ones(2, dtype=torch.bool),
        "tokens": torch.randint(0, VOCAB, (2, 12), generator=gen),
        "token_mask": torch.arange(12).expand(2, 12) < torch.tensor([[12], [9]]),
        "state": torch.randn(2, 32, generator=gen),
        "noise": torch.randn(2, 5, 32, generator=gen),
    }
    model.eval()
    model.paligemma_with_expert.to_bfloat16_for_selected_params("float32")
    args = [[inputs["image"]], [inputs["image_mask"]], inputs["tokens"], inputs["token_mask"]]
    if kind == "pi0":
        args.append(inputs["state"])
    else:
        del inputs["state"]  # π0.5 takes the state in the prompt
    with torch.no_grad():
        actions = model.sample_actions(*args, noise=inputs["noise"], num_steps=3)
    reference = out.parent / f"{out.name}_reference.safetensors"
    save_file({**inputs, "actions": actions.float().contiguous()}, str(reference))


def main() -> None:
    import torch

    # PyPI's torchvision (a CUDA build) does not load its C ops beside the CPU torch: declare the two op schemas its
    # import registers fake kernels for, as tests/fixtures/lerobot/make_fixture.py does (nothing here calls them)
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    for kind in ("pi0", "pi05"):
        write(kind, HERE / f"lerobot_{kind}")


if __name__ == "__main__":
    main()
