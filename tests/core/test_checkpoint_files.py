"""Atomic, verifiable checkpoint files: truncated / corrupt / empty files fail in one line naming the file, a
directory resumes from its newest good checkpoint, a full disk keeps the previous checkpoint, and a checkpoint
cannot run code (``weights_only``)."""

from __future__ import annotations

import errno
import os
import pickle
import struct
from pathlib import Path

import pytest
import torch

from rlinf_core.cli.main import main
from rlinf_core.run.checkpoint_files import (
    CheckpointError,
    atomic_torch_save,
    load_checkpoint_file,
    resolve_resume_path,
    verify_checkpoint,
)

ROOT = Path(__file__).resolve().parents[2]


def _ckpt(step: int) -> dict:
    return {"state_dict": {"w": torch.full((64, 64), float(step))}, "global_step": step, "epoch": step}


@pytest.fixture
def ckpt_dir(tmp_path) -> Path:
    d = tmp_path / "version_0" / "checkpoints"
    for step in (4, 8, 12):
        atomic_torch_save(_ckpt(step), d / f"epoch={step // 4 - 1}-step={step}.ckpt")
    os.symlink("epoch=2-step=12.ckpt", d / "last.ckpt")
    return d


def _corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:  # one flipped byte inside the tensor data: only the zip CRC notices
        i = data.index(struct.pack("<f", 12.0) * 4)  # in the middle of the tensor data
        path.write_bytes(data[:i] + b"\x01" + data[i + 1 :])


@pytest.mark.parametrize("how", ["truncated", "empty", "flipped"])
def test_bad_checkpoint_fails_in_one_line_and_directory_falls_back(ckpt_dir, how, capsys):
    newest = ckpt_dir / "epoch=2-step=12.ckpt"
    _corrupt(newest, how)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint_file(newest)
    assert str(newest) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match="newest good one is .*epoch=1-step=8.ckpt"):
        resolve_resume_path(str(ckpt_dir / "last.ckpt"))  # an explicit file: no silent fallback, but the hint
    assert resolve_resume_path(str(ckpt_dir.parent)).endswith("epoch=1-step=8.ckpt")  # a directory: automatic
    assert "skipping checkpoint" in capsys.readouterr().err
    assert load_checkpoint_file(resolve_resume_path(str(ckpt_dir)))["global_step"] == 8


def test_disk_full_keeps_the_previous_checkpoint(ckpt_dir, monkeypatch):
    target = ckpt_dir / "epoch=2-step=12.ckpt"
    before = target.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CheckpointError, match=r"No space left on device; the previous checkpoint .* is intact"):
        atomic_torch_save(_ckpt(16), target)
    assert target.read_bytes() == before
    assert not [p for p in ckpt_dir.iterdir() if ".tmp-" in p.name], "no temporary file left behind"


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_checkpoint_cannot_run_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": _Exploit()}, path, pickle_protocol=pickle.DEFAULT_PROTOCOL)
    with pytest.raises(CheckpointError, match="cannot be loaded safely"):
        load_checkpoint_file(path)
    assert not (tmp_path / "pwned").exists()


def test_cli_resume_from_a_corrupt_checkpoint_fails_in_one_line_without_a_run_dir(ckpt_dir, tmp_path, capsys):
    _corrupt(ckpt_dir / "epoch=2-step=12.ckpt", "truncated")
    with pytest.raises(SystemExit) as info:
        main(
            [
                "fit",
                "--config",
                str(ROOT / "configs/toy/reach_grpo.yaml"),
                f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
                "--ckpt_path",
                str(ckpt_dir / "epoch=2-step=12.ckpt"),
            ]
        )
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlinf:")]
    assert info.value.code == 2 and len(err) == 1 and "epoch=2-step=12.ckpt is truncated or corrupt" in err[0]
    assert not (tmp_path / "runs").exists()


def test_verify_accepts_a_good_checkpoint(ckpt_dir):
    verify_checkpoint(ckpt_dir / "last.ckpt")


def test_truncated_safetensors_fail_in_one_line_naming_the_file(tmp_path):
    from safetensors.torch import save_file

    from rlinf_core.builtin.toy_policy import TinyVLAPolicy

    TinyVLAPolicy(action_dim=2, num_action_chunks=2, hidden_size=32).save_pretrained(tmp_path / "tiny")
    weights = tmp_path / "tiny" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"weights file .*tiny/model.safetensors is truncated or corrupt"):
        TinyVLAPolicy(action_dim=2, num_action_chunks=2, hidden_size=32, model_path=str(tmp_path / "tiny"))

    from rlinf_core.models.weights import load_weights  # the sharded-directory reader every VLA plugin uses

    vla = tmp_path / "vla"
    vla.mkdir()
    save_file({"w": torch.zeros(256)}, str(vla / "model.safetensors"))
    (vla / "model.safetensors").write_bytes((vla / "model.safetensors").read_bytes()[:120])
    with pytest.raises(ValueError, match=r"vla/model.safetensors is truncated or corrupt") as info:
        load_weights(vla)
    assert "\n" not in str(info.value)


def test_save_model_files_with_tied_weights_load_with_the_tie(tmp_path):
    """safetensors.torch.save_model (openpi's writer) drops one name of a tied pair and writes {dropped: kept} into
    the metadata, with no "format" key: a valid file, loaded with both names."""
    from safetensors import safe_open
    from safetensors.torch import save_model

    from rlinf_core.models.weights import load_safetensors, load_weights

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight

    model = Tied()
    save_model(model, str(tmp_path / "model.safetensors"))
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        assert "format" not in f.metadata() and len(list(f.keys())) == 1  # what upstream's writer really wrote
    for state in (load_safetensors(tmp_path / "model.safetensors"), load_weights(tmp_path)):
        assert sorted(state) == ["embed.weight", "head.weight"]
        assert torch.equal(state["embed.weight"], model.embed.weight) and torch.equal(
            state["head.weight"], model.embed.weight
        )


def test_a_valid_safetensors_file_is_never_called_corrupt(tmp_path, monkeypatch):
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    from rlinf_core.models.weights import load_safetensors

    save_file({"w": torch.zeros(4)}, str(tmp_path / "model.safetensors"), metadata={"format": "tf"})
    assert torch.equal(load_safetensors(tmp_path / "model.safetensors")["w"], torch.zeros(4))

    import safetensors

    class _Handle:  # a valid file whose tensor this torch cannot build (e.g. a dtype it lacks)
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def metadata(self):
            return {}

        def keys(self):
            return ["w"]

        def get_tensor(self, name):
            raise SafetensorError("unsupported dtype F8_E8M0")

    monkeypatch.setattr(safetensors, "safe_open", _Handle)
    with pytest.raises(CheckpointError) as info:
        load_safetensors(tmp_path / "model.safetensors")
    message = str(info.value)
    assert "corrupt" not in message and "truncated" not in message and "'w'" in message and "F8_E8M0" in message
