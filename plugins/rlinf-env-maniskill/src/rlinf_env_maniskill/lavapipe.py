"""Software Vulkan (Mesa lavapipe) for SAPIEN on machines without a GPU.

SAPIEN 3 needs a Vulkan device even for state observations, and it rejects Mesa older than 24.3
(``VK_KHR_external_semaphore_fd`` is missing there; Debian 12 ships 22.3). ``install_lavapipe.sh``
unpacks a newer lavapipe into a private directory without touching the system; this module points
the current process at it before SAPIEN is imported:

- ``VK_ICD_FILENAMES`` selects the private ICD json;
- the private libraries lavapipe needs (libdrm, and on a bare machine LLVM, xcb, ...) are
  pre-loaded by absolute path with ``ctypes``, because the dynamic loader reads
  ``LD_LIBRARY_PATH`` only at process start; ``LD_LIBRARY_PATH`` is still exported so that
  child processes find them the ordinary way.

Nothing happens when ``VK_ICD_FILENAMES`` / ``VK_DRIVER_FILES`` is already set, or when an NVIDIA
driver is present (SAPIEN then renders on the GPU).

Command line::

    python -m rlinf_env_maniskill.lavapipe install [--force] [DIR]   # run the bundled installer
    python -m rlinf_env_maniskill.lavapipe status                    # what would be used
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

INSTALL_HINT = (
    "bash plugins/rlinf-env-maniskill/scripts/install_lavapipe.sh "
    "(from a pip install: python -m rlinf_env_maniskill.lavapipe install)"
)
_LIB_SUBDIR = "rootfs/usr/lib/x86_64-linux-gnu"
_ALWAYS_FROM_SYSTEM = (
    "libc.so",
    "libm.so",
    "libdl.so",
    "libpthread.so",
    "librt.so",
    "ld-linux",
    "libstdc++.so",
    "libgcc_s.so",
)
_configured: str | None = None


def default_dir() -> Path:
    """Where the installer puts lavapipe and where it is looked for (``$RLINF_LAVAPIPE_DIR``)."""
    env = os.environ.get("RLINF_LAVAPIPE_DIR")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "rlinf" / "lavapipe"


def is_installed(directory: Path | None = None) -> bool:
    d = directory or default_dir()
    return (d / "lvp_icd.json").is_file() and (d / _LIB_SUBDIR / "libvulkan_lvp.so").is_file()


def nvidia_present() -> bool:
    return os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


def needed_libraries(path: str | os.PathLike) -> list[str]:
    """``DT_NEEDED`` entries of a 64-bit little-endian ELF shared object."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []
    entries, strtab = [], None
    for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag == 1:  # DT_NEEDED
            entries.append(val)
        elif tag == 5:  # DT_STRTAB (a virtual address)
            strtab = next((o + val - v for v, o, s in loads if v <= val < v + s), None)
    if strtab is None:
        return []
    return [data[strtab + e : data.index(b"\0", strtab + e)].decode() for e in entries]


def _already_loaded(soname: str) -> bool:
    try:
        ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
        return True
    except OSError:
        return False


def preload(libdir: Path, roots: tuple[str, ...] = ("libvulkan_lvp.so",)) -> list[str]:
    """Load the private libraries ``roots`` depend on, dependencies first; returns what was loaded.

    A library whose soname is already loaded in this process (or one of the C/C++ runtimes) is
    left to the system copy: loading a second copy of the same soname would clash.
    """
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        path = libdir / name
        if not path.is_file():
            return
        for dep in needed_libraries(path):
            visit(dep)
        order.append(name)

    for root in roots:
        for dep in needed_libraries(libdir / root):
            visit(dep)
    if (libdir / "libvulkan.so.1").is_file():
        visit("libvulkan.so.1")  # SAPIEN dlopens the Vulkan loader by soname
    loaded = []
    for name in order:
        if name.startswith(_ALWAYS_FROM_SYSTEM) or _already_loaded(name):
            continue
        ctypes.CDLL(str(libdir / name), mode=ctypes.RTLD_GLOBAL)
        loaded.append(name)
    return loaded


def configure(directory: str | os.PathLike | None = None) -> str:
    """Point this process's Vulkan loader at the private lavapipe when that is what to use.

    Must run before SAPIEN is imported. Returns how Vulkan will be found: ``"user"``
    (``VK_ICD_FILENAMES`` / ``VK_DRIVER_FILES`` already set), ``"nvidia"``, ``"lavapipe"`` (the
    private copy) or ``"system"`` (nothing found; the system's drivers, if any, are used).
    """
    global _configured
    if _configured is not None:
        return _configured
    d = Path(directory).expanduser() if directory is not None else default_dir()
    inherited = os.environ.get("RLINF_LAVAPIPE_ACTIVE")  # set by a parent process that configured it
    if inherited and os.environ.get("VK_ICD_FILENAMES") == str(Path(inherited) / "lvp_icd.json"):
        d = Path(inherited)
        os.environ.pop("VK_ICD_FILENAMES")
    if os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES"):
        _configured = "user"
    elif nvidia_present():
        _configured = "nvidia"
    elif is_installed(d):
        libdir = d / _LIB_SUBDIR
        preload(libdir)
        os.environ["VK_ICD_FILENAMES"] = str(d / "lvp_icd.json")
        os.environ["RLINF_LAVAPIPE_ACTIVE"] = str(d)
        old = os.environ.get("LD_LIBRARY_PATH", "")
        if str(libdir) not in old.split(":"):
            os.environ["LD_LIBRARY_PATH"] = f"{libdir}:{old}" if old else str(libdir)
        _configured = "lavapipe"
    else:
        _configured = "system"
    return _configured


def device_summary() -> str:
    """SAPIEN's list of Vulkan devices (imports SAPIEN; call :func:`configure` first)."""
    import sapien

    return sapien.render.get_device_summary()


def check_render_device() -> None:
    """Raise a one-line error unless SAPIEN found a Vulkan device it can render with."""
    try:
        summary = device_summary()
    except RuntimeError:  # SAPIEN: "failed to find a rendering device"
        summary = ""
    if "Supported: 1" in summary:
        return
    how = {
        "lavapipe": f"the lavapipe in {default_dir()} was not accepted; reinstall it with {INSTALL_HINT} --force",
        "nvidia": "an NVIDIA driver is present but SAPIEN found no usable Vulkan device; check the driver's Vulkan ICD",
        "user": "VK_ICD_FILENAMES/VK_DRIVER_FILES is set but names no usable driver; unset it or fix it",
    }.get(_configured or "", f"on a machine without a GPU install Mesa >= 24.3 lavapipe once with: {INSTALL_HINT}")
    raise RuntimeError(
        f"ManiSkill/SAPIEN found no Vulkan device to render with (needed even for state observations): {how}"
    )


def installer_path() -> Path:
    return Path(__file__).with_name("install_lavapipe.sh")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args.pop(0) if args else "status"
    if command == "install":
        return subprocess.call(["bash", str(installer_path()), *args])
    if command == "status":
        mode = configure()
        print(f"lavapipe dir: {default_dir()} ({'installed' if is_installed() else 'not installed'}); vulkan: {mode}")
        try:
            print(device_summary())
        except ImportError:
            print("sapien is not installed: pip install rlinf-env-maniskill")
        return 0
    print("usage: python -m rlinf_env_maniskill.lavapipe [install [--force] [DIR] | status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
