"""The core world-model conformance kit on the tiny OpenSora world model (released layout, real loaders)."""

from rlinf_core.testing.world_model_conformance import WorldModelPluginTests
from rlinf_wm_opensora.testing import tiny_world_model
from rlinf_wm_opensora.world_model import OpenSoraWorldModel


class TestOpenSoraWorldModel(WorldModelPluginTests):
    model_class = OpenSoraWorldModel
    image_size = 32
    chunk = 8
    pretrained_overrides = {"num_sampling_steps": 3}

    def make_model(self):
        return OpenSoraWorldModel(str(tiny_world_model()), num_sampling_steps=2)
