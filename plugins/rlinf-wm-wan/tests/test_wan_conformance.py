"""The world-model plugin kit on the tiny Wan (released layout, real loaders)."""

import pytest

from rlinf_core.testing.world_model_conformance import WorldModelPluginTests
from rlinf_wm_wan import WanWorldModel


class TestWanWorldModelKit(WorldModelPluginTests):
    model_class = WanWorldModel
    image_size = 64
    chunk = 4  # 5 condition + 4 = 9 = 1 + 4k frames (upstream: 8)
    pretrained_overrides = {"num_inference_steps": 3}

    @pytest.fixture(autouse=True)
    def _tiny(self, tiny_wan):
        self.tiny = tiny_wan

    def make_model(self):
        return WanWorldModel(model_path=str(self.tiny), num_inference_steps=2)
