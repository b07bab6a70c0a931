"""Write ``opensora_fork_ckpt/``: a training checkpoint exactly as the RLinf/opensora fork's trainer writes it.

Runs the fork's own code (RLinf/opensora @ c1646dd5e4a499cb9dee0b14b1966e160b9fe48a, a checkout given as FORK) in a
separate venv with torch 2.13.0 CPU and colossalai 0.5.0 (RLinf v0.3's pin), installed as::

    pip install torch==2.13.0 safetensors numpy packaging psutil tqdm rich click einops pydantic contexttimer ninja \
        transformers==4.51.3 peft==0.13.2   # colossalai 0.5.0's own pins (peft fails against newer transformers)
    BUILD_EXT=0 pip install --no-deps --no-build-isolation colossalai==0.5.0
    pip install --no-deps galore-torch==1.0 bitsandbytes==0.48.2 timm==0.9.16 rotary_embedding_torch mmengine \
        diffusers==0.29.0 torchvision==0.28.0
    pip install pillow addict yapf termcolor opencv-python-headless
    python make_opensora.py FORK [OUT_DIR]

The sequence is ``scripts/train_web.py``'s, on one CPU process (gloo): ``create_colossalai_plugin("zero2", bf16)``
(a ``LowLevelZeroPlugin``), the fork's ``STDiT3`` built as ``build_module`` builds it but tiny, the float32 EMA copy
and ``record_model_param_shape``, ``booster.boost``, ``model_sharding(ema)``, then ``CheckpointIO.save(...,
async_io=False)`` exactly as ``train_web.py:420`` calls it. What is not the fork's (stubbed imports, no optimizer
and no training step: colossalai's ZeRO optimizer needs CUDA): see the corpus README. ``<OUT>_reference.safetensors``
beside it holds the fork's ``STDiT3.forward`` output on fixed inputs, from the EMA loaded as
``config/val_config.yaml`` loads it (``ema.pt`` through the fork's ``load_checkpoint``) and from the directory
through the same function (colossalai's ``GeneralCheckpointIO.load_model`` on ``model/``).
"""

from __future__ import annotations

import shutil
import socket
import sys
import types
from copy import deepcopy
from pathlib import Path

HERE = Path(__file__).resolve().parent
TINY = dict(depth=2, hidden_size=32, num_heads=2, patch_size=(1, 2, 2), caption_channels=8, model_max_length=4)
LATENT = (12, 4, 4)  # T (4 condition + 8 generated latents), h, w: 32-px frames through an 8x VAE


def stub_imports() -> None:
    import torch

    # PyPI's torchvision (a CUDA build) does not load its C ops beside the CPU torch: declare the two op schemas its
    # import registers fake kernels for (nothing here calls them), as make_lerobot.py does
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    stub_imports.lib = lib
    # tensornvme (compiled NVMe I/O) is imported by ckpt_utils for the async writer only; async_io=False never uses it
    nvme = types.ModuleType("tensornvme")
    nvme.async_file_io = types.ModuleType("tensornvme.async_file_io")
    nvme.async_file_io.AsyncFileWriter = type("AsyncFileWriter", (), {})
    sys.modules.update({"tensornvme": nvme, "tensornvme.async_file_io": nvme.async_file_io})
    import diffusers.models  # noqa: F401  (before the stub below: diffusers probes for a real xformers)

    # xformers (CUDA kernels) is imported by layers/blocks.py; its attention is called only when
    # mem_eff_attention / the cross-attention run, and neither does here (STDiT3's cross-attention is commented out)
    xf = types.ModuleType("xformers")
    xf.ops = types.ModuleType("xformers.ops")
    sys.modules.update({"xformers": xf, "xformers.ops": xf.ops})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(fork: Path, out: Path) -> None:
    sys.path.insert(0, str(fork))
    stub_imports()
    import colossalai
    import torch
    from colossalai.booster import Booster
    from safetensors.torch import save_file

    colossalai.launch(rank=0, world_size=1, host="127.0.0.1", port=free_port(), backend="gloo", seed=0)
    from opensora.models.stdit.stdit3 import STDiT3, STDiT3Config
    from opensora.utils.ckpt_utils import CheckpointIO, load_checkpoint, model_sharding, record_model_param_shape
    from opensora.utils.train_utils import create_colossalai_plugin

    torch.manual_seed(0)
    dtype = torch.bfloat16  # val_config.yaml: dtype bf16, plugin zero2
    plugin = create_colossalai_plugin(plugin="zero2", dtype="bf16", grad_clip=1.0, sp_size=1)
    booster = Booster(plugin=plugin)

    def build() -> STDiT3:  # STDiT3_XL_2 with the sizes shrunk; the kwargs val_config.yaml and train_web.py pass
        config = STDiT3Config(
            **TINY,
            input_size=LATENT,
            in_channels=4,
            qk_norm=True,
            enable_flash_attn=False,
            enable_layernorm_kernel=False,
            enable_sequence_parallelism=False,
            action_dim=7,
            pad_action_num=4,
        )
        return STDiT3(config)

    model = build().to("cpu", dtype).train()
    ema = deepcopy(model).cpu().to(torch.float32)
    ema.requires_grad_(False)
    ema_shape_dict = record_model_param_shape(ema)
    ema.eval()
    # train_web.py boosts the model with colossalai's HybridAdam, which LowLevelZeroPlugin wraps in its ZeRO
    # optimizer; that one asserts a CUDA / NPU device ("device is required", low_level_optim.py:254), so the model is
    # boosted alone (the plugin still wraps it in its LowLevelZeroModel, in bf16) and no step is taken
    torch.set_default_dtype(dtype)
    model, _, _, _, _ = booster.boost(model=model)
    torch.set_default_dtype(torch.float)
    model_sharding(ema, device=torch.device("cpu"))

    tmp = out.parent / (out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    # the EMA's buffers are allocated with torch.empty(pin_memory=True), which needs a CUDA allocator; page-locking
    # changes where the host bytes live, not their values: pin_memory is dropped for the duration of the save
    empty = torch.empty
    torch.empty = lambda *a, pin_memory=False, **kw: empty(*a, **kw)
    try:
        save_dir = CheckpointIO().save(
            booster,
            str(tmp),
            model=model,
            ema=ema,
            optimizer=None,
            lr_scheduler=None,
            sampler=None,
            epoch=0,
            step=1,
            global_step=1,
            batch_size=1,
            ema_shape_dict=ema_shape_dict,
            async_io=False,
        )
    finally:
        torch.empty = empty
    shutil.rmtree(out, ignore_errors=True)
    Path(save_dir).rename(out)
    shutil.rmtree(tmp)
    log = out / "async_file_io.log"  # named by CheckpointIO.save for tensornvme; written only by its async writer
    assert not log.exists()

    g = torch.Generator().manual_seed(1)
    B = 2
    x = torch.randn(B, 4, *LATENT, generator=g)
    t = torch.rand(B, generator=g) * 1000
    actions = torch.rand(B, LATENT[0] - 4, 7, generator=g) * 2 - 1
    x_mask = torch.zeros(B, LATENT[0], dtype=torch.bool)
    x_mask[:, 4:] = True  # the 4 condition latents, then the 8 generated
    hw = torch.full((B,), 32.0)
    reference = {"x": x, "t": t, "actions": actions, "x_mask": x_mask, "height_width": hw}
    with torch.no_grad():
        for name, path in (("ema", out / "ema.pt"), ("model", out)):
            net = build().eval()
            load_checkpoint(net, str(path), strict=True) if name == "model" else load_checkpoint(net, str(path))
            reference[f"out_{name}"] = net(x, t, actions, x_mask=x_mask, height=hw, width=hw).float()
    save_file({k: v.contiguous() for k, v in reference.items()}, str(out.parent / f"{out.name}_reference.safetensors"))
    print(sorted(p.relative_to(out).as_posix() for p in out.rglob("*")))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "opensora_fork_ckpt")
