"""Write ``openvla_hf/``: a tiny OpenVLA checkpoint saved by openvla/openvla's own Hugging Face code, as its
``vla-scripts/extern/convert_openvla_weights_to_hf.py`` saves openvla-7b, plus ``reference.json``: what that code's
processor and ``predict_action`` give on one image (see README.md beside this file). Two steps:

    # 1. tokenizer files (Llama-2's 32000-piece layout, trained locally: Llama-2's own cannot be downloaded here)
    .venv/bin/python tests/upstream_corpus/make_openvla.py tokenizer
    # 2. everything else, with openvla/openvla's prismatic/extern/hf code under the versions it pins
    #    (transformers==4.40.1, timm==0.9.10, tokenizers==0.19.1), in a separate venv
    /tmp/ovla/bin/python tests/upstream_corpus/make_openvla.py save <openvla checkout>

The towers are timm's own ``vit_large_patch14_reg4_dinov2`` / ``vit_so400m_patch14_siglip_224`` built at width 32,
depth 2 (``timm.create_model`` given those sizes): the checkpoint records the sizes in ``timm_model_configs``, an
extra OpenVLAConfig kwarg that transformers serialises with the rest.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "openvla_hf"
UNNORM_KEY = "tiny_reach"
TASK = "put the black bowl on the plate"
TOWER = {"embed_dim": 32, "depth": 2, "num_heads": 2, "mlp_ratio": 4.0}
SIZES = {"image_size": 224, "patch_size": 14, "width": 32, "depth": 2, "heads": 2, "mlp_dim": 128}
N_BINS, PAD_MULTIPLE, LLAMA_VOCAB, LLAMA_SPACE_ID = 256, 64, 32000, 29871


def write_tokenizer() -> None:
    """Llama-2's id layout where openvla's code depends on it: 32000 pieces, <PAD> = 32000, and the space piece
    "▁" at 29871 (predict_action appends id 29871 to every prompt)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    from rlinf_policy_openvla.make_tiny import build_tokenizer

    OUT.mkdir(parents=True, exist_ok=True)
    build_tokenizer(OUT, N_BINS, PAD_MULTIPLE, vocab_size=LLAMA_VOCAB)
    proto = pb.ModelProto()
    proto.ParseFromString((OUT / "tokenizer.model").read_bytes())
    space = next(i for i, p in enumerate(proto.pieces) if p.piece == "\u2581")
    a, b = pb.ModelProto.SentencePiece(), pb.ModelProto.SentencePiece()
    a.CopyFrom(proto.pieces[space])
    b.CopyFrom(proto.pieces[LLAMA_SPACE_ID])
    proto.pieces[space].CopyFrom(b)
    proto.pieces[LLAMA_SPACE_ID].CopyFrom(a)
    (OUT / "tokenizer.model").write_bytes(proto.SerializeToString())
    (OUT / "tokenizer.json").unlink()  # rebuilt from tokenizer.model by the pinned transformers in step 2


def _statistics():
    import numpy as np

    rng = np.random.default_rng(0)
    low = -1 + 0.1 * rng.random(7)
    high = 1 - 0.1 * rng.random(7)
    action = {
        "mean": np.zeros(7),
        "std": np.full(7, 0.5),
        "max": np.ones(7),
        "min": -np.ones(7),
        "q01": low,
        "q99": high,
        "mask": [True] * 6 + [False],
    }
    proprio = {k: np.zeros(7) for k in ("mean", "std", "max", "min", "q01", "q99")}
    return {
        UNNORM_KEY: {
            "action": action,
            "proprio": proprio,
            "num_transitions": np.array(1000),
            "num_trajectories": np.array(20),
        }
    }


def _save_dataset_statistics(openvla: Path, stats, run_dir: Path) -> None:
    """openvla's prismatic/vla/datasets/rlds/utils/data_utils.py:save_dataset_statistics, its module loaded with
    the imports that function never uses (dlimp, tensorflow, overwatch) stubbed."""
    import importlib.util

    class _Unused(types.ModuleType):  # any attribute, call or decorator: the module's TF helpers are never run
        def __getattr__(self, name):
            return _Unused(name)

        def __call__(self, *args, **kwargs):
            return args[0] if len(args) == 1 and callable(args[0]) else _Unused("call")

    for name in ("dlimp", "tensorflow", "tqdm"):
        sys.modules[name] = _Unused(name)
    overwatch = types.ModuleType("prismatic.overwatch")
    overwatch.initialize_overwatch = lambda name: types.SimpleNamespace(info=print, warning=print)
    sys.modules["prismatic.overwatch"] = overwatch
    path = openvla / "prismatic" / "vla" / "datasets" / "rlds" / "utils" / "data_utils.py"
    spec = importlib.util.spec_from_file_location("openvla_data_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.save_dataset_statistics(stats, run_dir)


def save(openvla: Path) -> None:
    import numpy as np
    import timm
    import torch
    from PIL import Image

    sys.path.insert(0, str(openvla))
    create = timm.create_model
    timm.create_model = lambda name, **kw: create(name, **{**kw, **TOWER})  # timm's towers at tiny sizes

    from prismatic.extern.hf.configuration_prismatic import OpenVLAConfig
    from prismatic.extern.hf.modeling_prismatic import OpenVLAForActionPrediction
    from prismatic.extern.hf.processing_prismatic import PrismaticImageProcessor, PrismaticProcessor
    from transformers import AutoTokenizer

    stats = _statistics()
    plain = json.loads(json.dumps(stats, default=lambda a: a.tolist()))
    dino = {**SIZES, "num_reg_tokens": 4, "class_token": True, "layer_scale": True}
    siglip = {**SIZES, "class_token": False, "attn_pool": True}
    config = OpenVLAConfig(
        vision_backbone_id="dinosiglip-vit-so-224px",
        llm_backbone_id="llama2-7b-pure",
        arch_specifier="no-align+fused-gelu-mlp",
        image_resize_strategy="resize-naive",
        text_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "vocab_size": LLAMA_VOCAB,
        },
        norm_stats={k: {"action": v["action"], "proprio": v["proprio"]} for k, v in plain.items()},
        n_action_bins=N_BINS,
        timm_model_configs=[dino, siglip],
    )
    # convert_openvla_weights_to_hf.py: the tokenizer with <PAD>, the text config patched the same way
    tokenizer = AutoTokenizer.from_pretrained(str(OUT), model_max_length=config.llm_max_length, padding_side="right")
    tokenizer.add_special_tokens({"pad_token": "<PAD>"})
    tokenizer.init_kwargs.pop("add_prefix_space", None)
    assert tokenizer.pad_token_id == config.pad_token_id, (tokenizer.pad_token_id, config.pad_token_id)
    config.text_config.vocab_size += config.pad_to_multiple_of
    config.text_config.pad_token_id = config.pad_token_id
    config.text_config.torch_dtype = torch.bfloat16
    input_sizes, interpolations, means, stds = [], [], [], []
    for idx, timm_id in enumerate(config.timm_model_ids):
        tower = timm.create_model(
            timm_id,
            pretrained=False,
            num_classes=0,
            img_size=config.image_sizes[idx],
            act_layer=config.timm_override_act_layers[idx],
        )
        data_cfg = timm.data.resolve_model_data_config(tower)
        input_sizes.append((3, config.image_sizes[idx], config.image_sizes[idx]))
        interpolations.append(data_cfg["interpolation"])
        means.append(data_cfg["mean"])
        stds.append(data_cfg["std"])
    image_processor = PrismaticImageProcessor(
        use_fused_vision_backbone=config.use_fused_vision_backbone,
        image_resize_strategy=config.image_resize_strategy,
        input_sizes=input_sizes,
        interpolations=interpolations,
        means=means,
        stds=stds,
    )
    processor = PrismaticProcessor(image_processor=image_processor, tokenizer=tokenizer)

    torch.manual_seed(0)
    model = OpenVLAForActionPrediction(config)
    with torch.no_grad():  # random weights whose greedy decode lands on action tokens, as a trained model's does
        head = model.language_model.lm_head.weight
        first_action = model.vocab_size - N_BINS
        head[:first_action].zero_()
        head[model.vocab_size :].zero_()
        head[first_action : model.vocab_size].normal_(0, 2.0)
    model.to(torch.bfloat16)
    # the script's hub-upload step, which gives the published files their auto_map entries
    OpenVLAConfig.register_for_auto_class()
    PrismaticImageProcessor.register_for_auto_class("AutoImageProcessor")
    PrismaticProcessor.register_for_auto_class("AutoProcessor")
    OpenVLAForActionPrediction.register_for_auto_class("AutoModelForVision2Seq")
    model.save_pretrained(str(OUT), max_shard_size="1MB")
    image_processor.save_pretrained(str(OUT))
    processor.save_pretrained(str(OUT))
    _save_dataset_statistics(openvla, stats, OUT)

    # the reference: upstream's processor and predict_action on the saved directory, in float32
    model = OpenVLAForActionPrediction.from_pretrained(str(OUT), torch_dtype=torch.float32).eval()
    processor = PrismaticProcessor(
        PrismaticImageProcessor.from_pretrained(str(OUT)), AutoTokenizer.from_pretrained(str(OUT))
    )
    rng = np.random.default_rng(1)
    pixels = (np.linspace(0, 255, 96)[None, :, None] + rng.integers(-40, 41, (80, 96, 3))).clip(0, 255)
    Image.fromarray(pixels.astype(np.uint8)).save(OUT / "reference_image.png")
    image = Image.open(OUT / "reference_image.png").convert("RGB")
    prompt = f"In: What action should the robot take to {TASK}?\nOut:"
    inputs = processor(prompt, image)
    with torch.no_grad():
        actions = model.predict_action(**inputs, unnorm_key=UNNORM_KEY, do_sample=False)
    pv = inputs["pixel_values"][0]
    reference = {
        "task": TASK,
        "unnorm_key": UNNORM_KEY,
        "image": "reference_image.png",
        "input_ids": inputs["input_ids"][0].tolist(),
        "pixel_values_strided": pv[:, ::16, ::16].tolist(),  # [6, 14, 14] of the [6, 224, 224] pixel values
        "actions": np.asarray(actions).tolist(),
    }
    (OUT / "reference.json").write_text(json.dumps(reference, indent=1))
    for code in OUT.glob("*.py"):  # the modeling code save_pretrained copies: this project commits no upstream code
        code.unlink()
    print("wrote", OUT, "actions", reference["actions"])


if __name__ == "__main__":
    write_tokenizer() if sys.argv[1] == "tokenizer" else save(Path(sys.argv[2]))
