"""Test-wide settings: one thread per process, no hub access, headless rendering."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402

torch.set_num_threads(1)

# The quick tier (`pytest -m "not slow"`, README) leaves out these whole files: multi-process strategies and env
# workers, subprocess fits, pip installs, real-simulator smoke configs, full-size meta builds. Single slow tests
# elsewhere carry @pytest.mark.slow themselves.
SLOW_FILES = {
    "tests/test_quickstart.py", "tests/test_configs.py", "tests/test_gpu_configs.py",
    "tests/test_imagination_example.py", "tests/core/test_kill_resume.py", "tests/core/test_console_output.py",
    "tests/core/test_plugin_tutorial.py", "tests/core/test_coevolve.py",
    "tests/scale/test_strategies_multiprocess.py", "tests/scale/test_env_workers.py", "tests/scale/test_bench_e2e.py",
    "plugins/rlinf-env-libero/tests/test_libero_workers.py", "plugins/rlinf-env-libero/tests/test_libero_smoke_config.py",
    "plugins/rlinf-env-maniskill/tests/test_maniskill_lavapipe.py",
    "plugins/rlinf-env-maniskill/tests/test_maniskill_smoke_config.py",
    "plugins/rlinf-policy-openpi/tests/test_openpi_ddp.py", "plugins/rlinf-policy-openpi/tests/test_openpi_strategies.py",
    "plugins/rlinf-policy-openpi/tests/test_openpi_fit.py", "plugins/rlinf-policy-openvla/tests/test_openvla_lora_ddp.py",
    "plugins/rlinf-policy-openvla/tests/test_openvla_fit.py", "plugins/rlinf-wm-opensora/tests/test_opensora_fit.py",
    "plugins/rlinf-wm-opensora/tests/test_opensora_wm_fit.py", "plugins/rlinf-wm-wan/tests/test_wan_fit.py",
    "plugins/rlinf-wm-wan/tests/test_wan_world_model_fit.py",
}


def pytest_collection_modifyitems(config, items):
    import pytest

    root = config.rootpath
    for item in items:
        try:
            rel = item.path.relative_to(root).as_posix()
        except ValueError:
            continue
        if rel in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
