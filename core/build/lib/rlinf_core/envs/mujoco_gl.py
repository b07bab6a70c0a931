"""Headless GL selection for MuJoCo-based env plugins (LIBERO, MetaWorld, ...).

MuJoCo reads ``MUJOCO_GL`` once, when it is first imported, so the backend must be chosen before
anything imports it; PyOpenGL (used by robosuite) reads ``PYOPENGL_PLATFORM`` the same way. Core
never imports MuJoCo itself.
"""

from __future__ import annotations

import os
import sys

GL_BACKENDS = ("egl", "osmesa", "glfw")
GL_INSTALL_HINT = "apt-get install libegl1 libgl1-mesa-dri (egl) or libosmesa6 (osmesa)"


def setup_gl(
    backend: str | None,
    owner: str,
    *,
    backends: tuple[str, ...] = GL_BACKENDS,
    loaded_modules: tuple[str, ...] = ("mujoco",),
) -> str:
    """Select the GL backend before MuJoCo is imported; returns the backend in use.

    Args:
        backend: the env's ``gl_backend`` setting (None: ``$MUJOCO_GL``, else ``egl``).
        owner: the env class name, for error messages.
        backends: backends this env supports (``glfw`` needs a display).
        loaded_modules: modules whose import fixes the backend (e.g. ``robosuite`` too).

    If MuJoCo was already imported with another backend, an explicit ``backend`` is an error and
    ``None`` keeps the one in use.
    """
    current = os.environ.get("MUJOCO_GL")
    wanted = backend or current or "egl"
    if wanted not in backends:
        raise ValueError(f"{owner}: gl_backend must be one of {', '.join(backends)}, got {wanted!r}")
    if any(m in sys.modules for m in loaded_modules) and current != wanted:
        if backend is None:
            return current or "glfw"
        raise RuntimeError(
            f"{owner}(gl_backend={backend!r}): mujoco was already imported with MUJOCO_GL={current!r}; "
            f"set MUJOCO_GL={backend} before anything imports mujoco"
        )
    os.environ["MUJOCO_GL"] = wanted
    if wanted != "glfw":
        os.environ.setdefault("PYOPENGL_PLATFORM", wanted)
    return wanted


def gl_import_error(exc: BaseException) -> ImportError:
    """One-line ImportError for a GL backend whose platform library is missing (PyOpenGL / MuJoCo)."""
    return ImportError(
        f"MuJoCo could not load GL backend MUJOCO_GL={os.environ.get('MUJOCO_GL')} ({exc}). Hint: {GL_INSTALL_HINT}"
    )
