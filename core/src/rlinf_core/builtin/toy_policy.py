"""Small policies for tests and plugin authors, on one shared image + instruction + state trunk.

:class:`TinyVLAPolicy` acts like token VLAs: each of the ``C × D`` action dimensions is one token
chosen among ``num_bins`` bins over [-1, 1] (like OpenVLA's 256 action bins), so log-probs are per
token ``[B, C, D]``. The continuous counterpart lives in :mod:`rlinf_core.builtin.toy_gaussian`. A value
head reads the shared features.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from rlinf_core.contracts.observation import Observation
from rlinf_core.contracts.policy import ActOutput, EvaluateOutput, Policy
from rlinf_core.foundation.checks import check_number
from rlinf_core.run.checkpoint_files import load_safetensors


def _hash_words(texts: list[str], buckets: int) -> torch.Tensor:
    """Bag-of-words over hashed buckets, ``float [B, buckets]``."""
    out = torch.zeros(len(texts), buckets)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, zlib.crc32(word.encode()) % buckets] += 1.0
    return out


class TinyTrunkPolicy(Policy):
    """Shared trunk of the tiny policies: conv image features + hashed words + state → ``hidden_size``.

    Subclasses call ``_build_trunk``, build their action head, call ``_build_value_head`` and list
    their extra constructor settings in ``_config`` (saved to ``config.json`` by :meth:`save_pretrained`).
    """

    model_type = "tiny"

    def _build_trunk(
        self, action_dim: int, num_action_chunks: int, hidden_size: int, state_dim: int, add_value_head: bool
    ) -> None:
        self.action_dim = action_dim
        self.num_action_chunks = num_action_chunks
        self.hidden_size = hidden_size
        self.state_dim = state_dim
        self.has_value_head = add_value_head
        self.text_buckets = 64
        self.vision = nn.Sequential(
            nn.Conv2d(3, 8, 5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
        )
        in_dim = 16 * 4 + self.text_buckets + state_dim
        self.trunk = nn.Sequential(
            nn.Linear(in_dim, hidden_size), nn.Tanh(), nn.Linear(hidden_size, hidden_size), nn.Tanh()
        )

    def _build_value_head(self) -> None:
        """Called after the action head (keeps the parameter order, hence the random init, of older versions)."""
        if self.has_value_head:
            hidden_size = self.hidden_size
            self.value_head = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, 1))

    def _features(self, obs: Observation) -> torch.Tensor:
        dev = self.device
        img = obs.main_images.to(dev).permute(0, 3, 1, 2).float() / 255.0
        parts = [self.vision(img), _hash_words(obs.task_descriptions, self.text_buckets).to(dev)]
        if self.state_dim:
            if obs.states is None or obs.states.shape[-1] != self.state_dim:
                got = None if obs.states is None else tuple(obs.states.shape)
                raise ValueError(f"{type(self).__name__} expects states [B, {self.state_dim}], got {got}")
            parts.append(obs.states.to(dev).float())
        return self.trunk(torch.cat(parts, dim=-1))

    def _values(self, feats: torch.Tensor) -> torch.Tensor | None:
        return self.value_head(feats) if self.has_value_head else None

    @torch.no_grad()
    def value(self, obs: Observation) -> torch.Tensor:
        if not self.has_value_head:
            raise ValueError(f"{type(self).__name__} has no value head (add_value_head: true)")
        return self._values(self._features(obs))

    def _config(self) -> dict[str, Any]:
        return {
            "action_dim": self.action_dim,
            "num_action_chunks": self.num_action_chunks,
            "hidden_size": self.hidden_size,
            "state_dim": self.state_dim,
            "add_value_head": self.has_value_head,
        }

    @classmethod
    def from_pretrained(cls, path, **overrides: Any) -> TinyTrunkPolicy:
        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{cls.__name__}.from_pretrained: {str(path)!r} has no config.json (save_pretrained layout)"
            )
        cfg = json.loads((path / "config.json").read_text())
        found = cfg.pop("model_type", cls.model_type)
        if found != cls.model_type:
            raise ValueError(f"{path} holds a {found!r} model, not {cls.model_type!r}; load it with its own class")
        policy = cls(**{**cfg, **overrides})
        state = load_safetensors(path / "model.safetensors")
        if not policy.has_value_head:
            state = {k: v for k, v in state.items() if not k.startswith("value_head.")}
        _check_shapes(policy, state, path)
        missing, _ = policy.load_state_dict(state, strict=False)
        if any(not k.startswith("value_head.") for k in missing):
            raise ValueError(f"{path}: weights lack {missing[0]!r}; was it written by {cls.__name__}.save_pretrained?")
        return policy

    def save_pretrained(self, path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({"model_type": self.model_type, **self._config()}, indent=2))
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, str(path / "model.safetensors"))


class TinyVLAPolicy(TinyTrunkPolicy):
    """Image + instruction + state → ``C × D`` discrete action tokens, with a value head.

    Args:
        action_dim: D, action dimensions per sub-step.
        num_action_chunks: C, sub-steps per chunk.
        num_bins: bins per action dimension over [-1, 1].
        hidden_size: width of the trunk.
        state_dim: size of ``Observation.states`` (0: ignore states).
        add_value_head: add a critic (needed for PPO with GAE).
        model_path: load weights and config from this directory (``save_pretrained`` layout); the
            other arguments are then ignored (use :meth:`from_pretrained` to override some).
    """

    model_type = "tiny_vla"

    def __init__(
        self,
        action_dim: int = 2,
        num_action_chunks: int = 2,
        num_bins: int = 11,
        hidden_size: int = 64,
        state_dim: int = 4,
        add_value_head: bool = True,
        model_path: str | None = None,
    ) -> None:
        super().__init__()
        if model_path is not None:
            cfg = _read_config(Path(model_path))
            action_dim, num_action_chunks, num_bins = cfg["action_dim"], cfg["num_action_chunks"], cfg["num_bins"]
            hidden_size, state_dim, add_value_head = cfg["hidden_size"], cfg["state_dim"], cfg["add_value_head"]
        for key, value, low in (
            ("action_dim", action_dim, 1),
            ("num_action_chunks", num_action_chunks, 1),
            ("num_bins", num_bins, 2),
            ("hidden_size", hidden_size, 1),
            ("state_dim", state_dim, 0),
        ):
            check_number(f"policy.{key}", value, low=low, high=65536)
        self._build_trunk(action_dim, num_action_chunks, hidden_size, state_dim, add_value_head)
        self.num_bins = num_bins
        self.action_head = nn.Linear(hidden_size, num_action_chunks * action_dim * num_bins)
        self._build_value_head()
        self.register_buffer("bin_centers", torch.linspace(-1, 1, num_bins), persistent=False)
        if model_path is not None:
            state = load_safetensors(Path(model_path) / "model.safetensors")
            _check_shapes(self, state, Path(model_path))
            self.load_state_dict(state)

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "num_bins": self.num_bins}

    def _logits(self, feats: torch.Tensor) -> torch.Tensor:
        B = feats.shape[0]
        return self.action_head(feats).view(B, self.num_action_chunks, self.action_dim, self.num_bins)

    @torch.no_grad()
    def act(self, obs: Observation, *, do_sample: bool = True, temperature: float = 1.0) -> ActOutput:
        feats = self._features(obs)
        logp_all = F.log_softmax(self._logits(feats) / temperature, dim=-1)  # as evaluate(), greedy or not
        if do_sample:
            tokens = torch.distributions.Categorical(logits=logp_all).sample()
        else:
            tokens = logp_all.argmax(-1)
        logprobs = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        return ActOutput(
            actions=self.bin_centers[tokens],
            logprobs=logprobs,
            values=self._values(feats),
            record={"action_tokens": tokens},
        )

    def evaluate(self, obs, record, *, temperature=1.0, compute_entropy=False, compute_values=False):
        feats = self._features(obs)
        logp_all = F.log_softmax(self._logits(feats) / temperature, dim=-1)
        tokens = record["action_tokens"].to(logp_all.device)
        logprobs = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1) if compute_entropy else None
        return EvaluateOutput(
            logprobs=logprobs, entropy=entropy, values=self._values(feats) if compute_values else None
        )

    def sft_loss(self, obs: Observation, actions: torch.Tensor) -> torch.Tensor:
        tokens = torch.bucketize(
            actions.clamp(-1, 1).to(self.bin_centers.device), (self.bin_centers[1:] + self.bin_centers[:-1]) / 2
        )
        logits = self._logits(self._features(obs))
        return F.cross_entropy(logits.reshape(-1, self.num_bins), tokens.reshape(-1))


def _check_shapes(module: nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    """``ValueError`` naming the tensor and both shapes when ``path``'s weights do not fit the sizes its
    ``config.json`` gives (``load_state_dict`` would raise a multi-line ``RuntimeError``)."""
    own = module.state_dict()
    for key, tensor in state.items():
        if key in own and tuple(own[key].shape) != tuple(tensor.shape):
            raise ValueError(
                f"{path / 'model.safetensors'}: {key} has shape {tuple(tensor.shape)} but the sizes in "
                f"{path / 'config.json'} build {tuple(own[key].shape)}: config.json does not match the "
                "weights (re-export the policy, or fix config.json)"
            )


_CONFIG_KEYS = ("action_dim", "num_action_chunks", "num_bins", "hidden_size", "state_dim", "add_value_head")


def _read_config(model_path: Path) -> dict[str, Any]:
    """``config.json`` of a TinyVLA directory, or a one-line ``ValueError`` naming the file and the key."""
    path = model_path / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"policy.model_path {model_path} has no config.json")
    try:
        cfg = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path} holds a JSON {type(cfg).__name__}, expected an object")
    for key in _CONFIG_KEYS:
        expected = bool if key == "add_value_head" else int
        if not isinstance(cfg.get(key), expected) or (expected is int and isinstance(cfg.get(key), bool)):
            raise ValueError(
                f"{path}: {key} must be {'a boolean' if expected is bool else 'an integer'}, got {cfg.get(key)!r}"
            )
    return cfg
