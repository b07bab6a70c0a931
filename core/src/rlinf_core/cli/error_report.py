"""Bad input answered in one line: ``rlinf: error: <cause>`` and exit status 2, never a traceback.

Only parsing and instantiating a config, and the documented checks before ``fit`` starts
(:mod:`rlinf_core.cli.checks`), count as input. Once training has started (``PHASE == "run"``, set by the checks'
callback at ``on_fit_start``, after setup and the checkpoint restore), an exception from the RL loop, a plugin's
``act`` / ``step`` or a callback is a bug: it keeps its traceback, headed by
``rlinf: bug in <module> during training (not a config error): ...``.
Only a checkpoint that cannot be read or written (:class:`~rlinf_core.run.checkpoint_files.CheckpointError`) and a
lost peer rank stay one-line errors there.

jsonargparse reports a value that fails while a class is built (``num_envs`` not a multiple of ``group_size``,
a missing ``model_path``) as two chained tracebacks and a ``Given value: Namespace(...)`` dump, and a parse
error after a usage dump. :func:`run_cli` turns both into the one-line cause. Exceptions that are not about
the user's input (bugs: ``RuntimeError``, ``AssertionError``, ...) keep their traceback; ``RLINF_TRACEBACK=1``
shows the traceback of every error.
"""

from __future__ import annotations

import os
import sys
from argparse import ArgumentError
from collections.abc import Callable

# errors that describe bad input (config values, files, plugins); anything else is a bug and keeps its traceback
INPUT_ERRORS = (
    ValueError,
    TypeError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    KeyError,
    ImportError,
    ArgumentError,
)
_NOISE = (
    "Given value",
    "Expected a ",
    "- Expected a ",
    "Does not validate against any of the types",
    "Problem with given class_path",
    "Not a valid subclass",
    "Parser key",
    "tip: For details",
)
MAX_LEN = 400
PHASE = "config"  # "run" between on_fit_start and on_train_end (rlinf_core.cli.checks)
# frames of these packages are not where a bug is reported (the deepest frame outside them is)
_LIBRARIES = (
    "torch",
    "lightning",
    "numpy",
    "jsonargparse",
    "pluggy",
    "importlib",
    "threading",
    "concurrent",
    "contextlib",
    "functools",
    "typing",
    "abc",
    "runpy",
    "rlinf_core.cli",
)


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of ``exc``'s ``raise ... from`` / during-handling chain."""
    seen = {id(exc)}
    while True:
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None or id(nxt) in seen:
            return exc
        seen.add(id(nxt))
        exc = nxt


def one_line(message: str, context: str = "") -> str:
    """The most specific line of a (jsonargparse) error message, without value dumps; ``context`` (the messages
    of the exceptions around it) may name the config key."""
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    useful = [ln.lstrip("- ").strip() for ln in lines if not ln.lstrip("- ").startswith(_NOISE)]
    useful = [ln for ln in useful if ln and not ln.startswith("Namespace(")]
    text = useful[-1] if useful else (lines[0] if lines else "unknown error")
    if "Given value" in text:
        text = text.split("Given value")[0].rstrip(" :")
    keys = [
        ln.split('"')[1]
        for ln in (lines + context.splitlines())
        if ln.startswith('Parser key "') and ln.count('"') >= 2
    ]
    if keys and keys[-1] not in text:
        text = f"{keys[-1]}: {text}"
    return text if len(text) <= MAX_LEN else text[: MAX_LEN - 3] + "..."


PEER_LOST = (
    "Connection reset by peer",
    "Connection closed by peer",
    "NCCL communicator was aborted",
    "Broken pipe",
    "ProcessGroupNCCL's watchdog",
)


def _peer_lost(exc: BaseException) -> str | None:
    """One line for a collective that failed because another rank died (DDP), naming this rank and the others."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or not any(k in text for k in PEER_LOST):
        return None
    import torch.distributed as dist

    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 0)
    others = [r for r in range(world) if r != rank]
    who = f"rank {others[0]}" if len(others) == 1 else f"one of ranks {others}" if others else "another rank"
    return (
        f"rank {rank} stopped: {who} died or was killed during a collective (connection lost); "
        "its own log has the cause; resume with --ckpt_path <run dir>"
    )


def _input_error(cause: BaseException) -> bool:
    if type(cause).__name__ == "MisconfigurationException":  # Lightning's verdict on a trainer flag
        return PHASE != "run"
    if PHASE == "run":
        from rlinf_core.contracts.observation_mismatch import ObservationMismatch
        from rlinf_core.run.checkpoint_files import CheckpointError

        return isinstance(cause, (CheckpointError, ObservationMismatch))
    return isinstance(cause, INPUT_ERRORS)


def bug_location(exc: BaseException) -> str:
    """The module of the deepest traceback frame outside torch / Lightning / the standard helpers."""
    tb, names = exc.__traceback__, []
    while tb is not None:
        names.append(str(tb.tb_frame.f_globals.get("__name__", "?")))
        tb = tb.tb_next
    ours = [n for n in names if n.split(".")[0] not in _LIBRARIES and not n.startswith(_LIBRARIES[-1])]
    return (ours or names or ["?"])[-1]


def _mismatch_in_chain(exc: BaseException | None) -> BaseException | None:
    """The :class:`~rlinf_core.contracts.observation_mismatch.ObservationMismatch` in ``exc``'s chain (its own
    cause, the policy's error, stays in the chain for ``RLINF_TRACEBACK=1``)."""
    from rlinf_core.contracts.observation_mismatch import ObservationMismatch

    for _ in range(20):
        if exc is None or isinstance(exc, ObservationMismatch):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def describe(exc: BaseException) -> str | None:
    """``"<cause>"`` for an input error (one line), ``None`` for a bug (keep the traceback)."""
    lost = _peer_lost(root_cause(exc)) or _peer_lost(exc)
    if lost is not None:
        return lost
    cause = _mismatch_in_chain(exc) or root_cause(exc)
    if not _input_error(cause) and not (PHASE != "run" and isinstance(exc, ArgumentError)):
        return None
    if isinstance(exc, ArgumentError) and not _input_error(cause):
        cause = exc
    chain, e = [], exc
    while e is not None and len(chain) < 20:
        chain.append(str(e))
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    text = one_line(str(cause) or type(cause).__name__, "\n".join(chain))
    if isinstance(cause, KeyError):  # str(KeyError) quotes its message: print the message itself
        text = (
            one_line(cause.args[0], "\n".join(chain))
            if cause.args and isinstance(cause.args[0], str)
            else text.strip("'\"")
        )
    elif isinstance(cause, (ImportError, FileNotFoundError, PermissionError)) and type(cause).__name__ not in text:
        text = f"{type(cause).__name__}: {text}"
    return text


def run_cli(fn: Callable[[], object]) -> object:
    """Call ``fn``; an input error exits with status 2 and ``rlinf: error: <cause>`` on stderr; a bug keeps its
    traceback under one line naming the module it came from."""
    global PHASE
    try:
        return fn()
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - filtered below: bugs are re-raised with their traceback
        text = describe(exc)
        if text is None:
            where = "training" if PHASE == "run" else "setup"
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            print(
                f"rlinf: bug in {bug_location(exc)} during {where} (not a config error): "
                f"{type(exc).__name__}: {first}; traceback follows",
                file=sys.stderr,
            )
            raise
        if os.environ.get("RLINF_TRACEBACK") == "1":
            raise
        print(f"rlinf: error: {text}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        PHASE = "config"
