"""Everything that touches metaworld / MuJoCo: GL selection, task instances, rendering, experts.

Imported lazily by :class:`~rlinf_env_metaworld.env.MetaWorldEnv` when the first sub-env is built.
"""

from __future__ import annotations

import atexit
import copy
import os
import warnings
import weakref

import numpy as np

from rlinf_core.envs import gl_import_error
from rlinf_core.envs import setup_gl as _setup_gl


def setup_gl(backend: str | None) -> str:
    """Select the headless GL backend (``egl`` / ``osmesa``, or ``glfw`` with a display) before MuJoCo is imported."""
    return _setup_gl(backend, "MetaWorldEnv")


def import_metaworld():
    """``(mujoco, env_dict, ENV_POLICY_MAP)`` or one clear ImportError with the install hint."""
    try:
        import mujoco
        from metaworld import env_dict
        from metaworld.policies import ENV_POLICY_MAP
    except ModuleNotFoundError as exc:
        raise ImportError(
            f"MetaWorldEnv needs metaworld 3.1 ({exc}). Hint: pip install 'metaworld==3.1.1' packaging"
        ) from exc
    except AttributeError as exc:  # PyOpenGL without the platform library (e.g. osmesa without libOSMesa)
        raise gl_import_error(exc) from exc
    return mujoco, env_dict, ENV_POLICY_MAP


_OPEN_RENDERERS: weakref.WeakSet = weakref.WeakSet()
_ATEXIT_REGISTERED = False


def _close_open_renderers() -> None:
    for renderer in list(_OPEN_RENDERERS):
        try:
            renderer.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to report to
            pass


_COMPILED: dict[str, object] = {}  # XML path -> pristine compiled MjModel (compiling costs ~0.3-0.5 s)
_FAST_CLASSES: dict[type, type] = {}


def _fast_class(cls: type) -> type:
    """``cls`` with its MuJoCo model compiled once per process and copied for every instance."""
    if cls not in _FAST_CLASSES:
        import mujoco

        def _initialize_simulation(self):
            base = _COMPILED.get(self.fullpath)
            if base is None:
                base = _COMPILED[self.fullpath] = mujoco.MjModel.from_xml_path(self.fullpath)
            model = copy.copy(base)
            return model, mujoco.MjData(model)

        _FAST_CLASSES[cls] = type(cls.__name__, (cls,), {"_initialize_simulation": _initialize_simulation})
    return _FAST_CLASSES[cls]


class SceneRenderer:
    """Offscreen RGB rendering for all task instances of one env, in one GL context.

    MuJoCo's GPU-side assets (textures, meshes) are uploaded once per *task* (an ``MjrContext``
    costs ~0.3-1 s on CPU Mesa) and shared by every instance of that task; the instance's own
    model and data still define the scene, so per-episode object and goal placements render
    correctly. The context is made current for a batch of renders and released afterwards, so
    the env may be stepped from any thread (pipelined rollouts).

    Args:
        image_size: side of the square images.
        fast_render: disable shadow maps, MSAA and reflections (about 10x faster on CPU; flatter
            images than the standard renders pretrained models saw).
    """

    def __init__(self, image_size: int, fast_render: bool) -> None:
        mujoco, _, _ = import_metaworld()
        self._mj = mujoco
        self.size = image_size
        self.fast_render = fast_render
        self._gl = mujoco.GLContext(image_size, image_size)
        # free GL contexts before MuJoCo's own exit hook terminates the EGL display (registered on the
        # first context; exit hooks run last-registered first), instead of noisy errors at exit
        global _ATEXIT_REGISTERED
        if not _ATEXIT_REGISTERED:
            atexit.register(_close_open_renderers)
            _ATEXIT_REGISTERED = True
        _OPEN_RENDERERS.add(self)
        self._rect = mujoco.MjrRect(0, 0, image_size, image_size)
        self._option = mujoco.MjvOption()
        self._tasks: dict[str, tuple] = {}
        self._cameras: dict[int, object] = {}

    def prepare(self, model) -> None:
        """Apply the render settings to a freshly built model (before its first render)."""
        if self.fast_render:
            model.vis.quality.shadowsize = 0
            model.vis.quality.offsamples = 0
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, self.size)
        model.vis.global_.offheight = max(model.vis.global_.offheight, self.size)

    def __enter__(self) -> SceneRenderer:
        self._gl.make_current()
        return self

    def __exit__(self, *exc) -> None:
        if os.environ.get("MUJOCO_GL") == "egl":  # let another thread take the context next time
            from mujoco import egl

            egl.EGL.eglMakeCurrent(
                egl.EGL_DISPLAY, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_CONTEXT
            )

    def _task_context(self, task: str, model) -> tuple:
        if task not in self._tasks:
            mj = self._mj
            con = mj.MjrContext(model, mj.mjtFontScale.mjFONTSCALE_100.value)
            scene = mj.MjvScene(model, maxgeom=10000)
            if self.fast_render:
                scene.flags[mj.mjtRndFlag.mjRND_SHADOW] = 0
                scene.flags[mj.mjtRndFlag.mjRND_REFLECTION] = 0
            self._tasks[task] = (con, scene)
        return self._tasks[task]

    def render(self, sim: TaskSim, camera_id: int, flip: bool, out: np.ndarray) -> None:
        """Render ``sim`` from camera ``camera_id`` into ``out`` (uint8 [H, W, 3]); call inside ``with``."""
        mj = self._mj
        con, scene = self._task_context(sim.task, sim.env.model)
        cam = self._cameras.get(camera_id)
        if cam is None:
            cam = self._cameras[camera_id] = mj.MjvCamera()
            cam.type, cam.fixedcamid = mj.mjtCamera.mjCAMERA_FIXED, camera_id
        mj.mjv_updateScene(sim.env.model, sim.env.data, self._option, None, cam, mj.mjtCatBit.mjCAT_ALL.value, scene)
        mj.mjr_setBuffer(mj.mjtFramebuffer.mjFB_OFFSCREEN.value, con)
        mj.mjr_render(self._rect, scene, con)
        mj.mjr_readPixels(out, None, self._rect, con)
        # OpenGL rows start at the bottom; corner cameras are also mounted upside down
        out[:] = out[:, ::-1] if flip else out[::-1]

    def close(self) -> None:
        if self._gl is None:
            return
        with self:
            for con, _ in self._tasks.values():
                con.free()
        self._tasks = {}
        self._gl.free()
        self._gl = None
        _OPEN_RENDERERS.discard(self)


class TaskSim:
    """One MetaWorld task instance (its own MuJoCo model and data) with its scripted expert.

    Args:
        task: metaworld task name, e.g. ``pick-place-v3``.
        renderer: the env's renderer (applies its settings to the new model).
    """

    def __init__(self, task: str, renderer: SceneRenderer):
        mujoco, env_dict, policies = import_metaworld()
        self._mujoco = mujoco
        self.task = task
        env = _fast_class(env_dict.ALL_V3_ENVIRONMENTS[task])()
        # What set_task would do, without freezing one goal: initial configurations are drawn
        # from env.np_random at reset, so seeding before reset gives one configuration per seed.
        env._set_task_called = True
        env._freeze_rand_vec = False
        env.seeded_rand_vec = True
        if env._partially_observable:
            env._partially_observable = False  # the expert needs the goal; MetaWorldEnv hides it itself
            env.__dict__.pop("sawyer_observation_space", None)
        env.max_path_length = 2**31 - 1  # episode limits belong to rlinf
        renderer.prepare(env.model)
        self.env = env
        self.expert = policies[task]()
        self.obs: np.ndarray | None = None
        self._state_spec = mujoco.mjtState.mjSTATE_INTEGRATION
        self._state = np.empty(mujoco.mj_stateSize(env.model, self._state_spec))

    def camera_id(self, name: str) -> int:
        cid = self._mujoco.mj_name2id(self.env.model, self._mujoco.mjtObj.mjOBJ_CAMERA, name)
        if cid < 0:
            model = self.env.model
            names = sorted(model.camera(i).name for i in range(model.ncam))
            raise ValueError(f"unknown MetaWorld camera {name!r}; valid: {', '.join(names)}")
        return cid

    def reset(self, seed: int) -> None:
        self.env.seed(seed)
        self.obs, _ = self.env.reset()

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        self.obs, reward, _, _, info = self.env.step(np.clip(action, -1.0, 1.0).astype(np.float32))
        return float(reward), bool(info["success"])

    def expert_actions(self, n: int) -> np.ndarray:
        """The scripted expert's next ``n`` actions ``[n, 4]``, found by simulating ahead and rewinding.

        MuJoCo is deterministic, so replaying the returned chunk reproduces the expert's
        closed-loop trajectory exactly.
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Constant(s) may be too high" from metaworld's policies
            first = np.clip(self.expert.get_action(self.obs), -1, 1).astype(np.float32)
            if n == 1:
                return first[None]
            mj, env = self._mujoco, self.env
            mj.mj_getState(env.model, env.data, self._state, self._state_spec)
            saved = (
                env.curr_path_length,
                env._prev_obs.copy(),
                env._last_stable_obs,
                env._did_see_sim_exception,
                self.obs,
            )
            actions = [first]
            try:
                for _ in range(n - 1):
                    self.step(actions[-1])
                    actions.append(np.clip(self.expert.get_action(self.obs), -1, 1).astype(np.float32))
            finally:
                mj.mj_setState(env.model, env.data, self._state, self._state_spec)
                mj.mj_forward(env.model, env.data)
                (env.curr_path_length, env._prev_obs, env._last_stable_obs, env._did_see_sim_exception, self.obs) = (
                    saved
                )
        return np.stack(actions)

    def close(self) -> None:
        self.env.close()
