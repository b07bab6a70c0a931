"""A small discrete-token policy for tests and plugin authors.

It mirrors how VLA policies act in rlinf: each of the ``C × D`` action dimensions is one token
chosen among ``num_bins`` bins over [-1, 1] (like OpenVLA's 256 action bins), so log-probs are
per token ``[B, C, D]``; a value head reads the shared features.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from rlinf.checkpoint_io import load_safetensors
from rlinf.envs.observation import Observation
from rlinf.policies.base import ActOutput, EvaluateOutput, Policy


def _hash_words(texts: list[str], buckets: int) -> torch.Tensor:
    """Bag-of-words over hashed buckets, ``float [B, buckets]``."""
    out = torch.zeros(len(texts), buckets)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, zlib.crc32(word.encode()) % buckets] += 1.0
    return out


class TinyVLAPolicy(Policy):
    """Image + instruction + state → ``C × D`` discrete action tokens, with a value head.

    Args:
        action_dim: D, action dimensions per sub-step.
        num_action_chunks: C, sub-steps per chunk.
        num_bins: bins per action dimension over [-1, 1].
        hidden_size: width of the trunk.
        state_dim: size of ``Observation.states`` (0: ignore states).
        add_value_head: add a critic (needed for PPO with GAE).
        model_path: load weights and config from this directory (``save_pretrained`` layout).
    """

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
            cfg = json.loads((Path(model_path) / "config.json").read_text())
            action_dim, num_action_chunks, num_bins = cfg["action_dim"], cfg["num_action_chunks"], cfg["num_bins"]
            hidden_size, state_dim, add_value_head = cfg["hidden_size"], cfg["state_dim"], cfg["add_value_head"]
        self.action_dim = action_dim
        self.num_action_chunks = num_action_chunks
        self.num_bins = num_bins
        self.hidden_size = hidden_size
        self.state_dim = state_dim
        self.has_value_head = add_value_head
        self.text_buckets = 64
        self.vision = nn.Sequential(
            nn.Conv2d(3, 8, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        )
        in_dim = 16 * 4 + self.text_buckets + state_dim
        self.trunk = nn.Sequential(nn.Linear(in_dim, hidden_size), nn.Tanh(), nn.Linear(hidden_size, hidden_size), nn.Tanh())
        self.action_head = nn.Linear(hidden_size, num_action_chunks * action_dim * num_bins)
        if add_value_head:
            self.value_head = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, 1))
        self.register_buffer("bin_centers", torch.linspace(-1, 1, num_bins), persistent=False)
        if model_path is not None:
            self.load_state_dict(load_safetensors(Path(model_path) / "model.safetensors"))

    def _features(self, obs: Observation) -> torch.Tensor:
        dev = self.bin_centers.device
        img = obs.main_images.to(dev).permute(0, 3, 1, 2).float() / 255.0
        parts = [self.vision(img), _hash_words(obs.task_descriptions, self.text_buckets).to(dev)]
        if self.state_dim:
            if obs.states is None or obs.states.shape[-1] != self.state_dim:
                got = None if obs.states is None else tuple(obs.states.shape)
                raise ValueError(f"TinyVLAPolicy expects states [B, {self.state_dim}], got {got}")
            parts.append(obs.states.to(dev).float())
        return self.trunk(torch.cat(parts, dim=-1))

    def _logits(self, feats: torch.Tensor) -> torch.Tensor:
        B = feats.shape[0]
        return self.action_head(feats).view(B, self.num_action_chunks, self.action_dim, self.num_bins)

    def _values(self, feats: torch.Tensor) -> torch.Tensor | None:
        return self.value_head(feats) if self.has_value_head else None

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
        return EvaluateOutput(logprobs=logprobs, entropy=entropy, values=self._values(feats) if compute_values else None)

    def sft_loss(self, obs: Observation, actions: torch.Tensor) -> torch.Tensor:
        tokens = torch.bucketize(actions.clamp(-1, 1).to(self.bin_centers.device), (self.bin_centers[1:] + self.bin_centers[:-1]) / 2)
        logits = self._logits(self._features(obs))
        return F.cross_entropy(logits.reshape(-1, self.num_bins), tokens.reshape(-1))

    def save_pretrained(self, path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        cfg = {
            "model_type": "tiny_vla",
            "action_dim": self.action_dim,
            "num_action_chunks": self.num_action_chunks,
            "num_bins": self.num_bins,
            "hidden_size": self.hidden_size,
            "state_dim": self.state_dim,
            "add_value_head": self.has_value_head,
        }
        (path / "config.json").write_text(json.dumps(cfg, indent=2))
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, str(path / "model.safetensors"))
