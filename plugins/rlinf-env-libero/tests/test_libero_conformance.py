"""LiberoEnv passes the same conformance tests as every env plugin, on real LIBERO simulators."""

import os
import tempfile

os.environ.setdefault("LIBERO_CONFIG_PATH", tempfile.mkdtemp(prefix="libero-config-"))  # no user config.yaml

from rlinf_core.testing.conformance import EnvPluginTests  # noqa: E402
from rlinf_env_libero import LiberoEnv  # noqa: E402
from rlinf_env_libero.settings import LiberoRenderConfig, LiberoSimConfig  # noqa: E402


class TestLiberoEnvConformance(EnvPluginTests):
    env_class = LiberoEnv
    # one task keeps the suite to a handful of simulator builds: later envs reuse the idle ones
    env_kwargs = {
        "task_suite_name": "libero_spatial",
        "task_id_filter": [0],
        "trials_per_task": 4,
        "render": LiberoRenderConfig(image_size=64, fast_render=True),
        "sim": LiberoSimConfig(settle_steps=2),
    }
