"""Bad input answered in one line: ``rlinf: error: <cause>`` and exit status 2, never a traceback.

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
from typing import Callable

# errors that describe bad input (config values, files, plugins); anything else is a bug and keeps its traceback
INPUT_ERRORS = (ValueError, TypeError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
                KeyError, ImportError, ArgumentError)
_NOISE = ("Given value", "Expected a ", "- Expected a ", "Does not validate against any of the types",
          "Problem with given class_path", "Not a valid subclass", "Parser key", "tip: For details")
MAX_LEN = 400


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
    keys = [ln.split('"')[1] for ln in (lines + context.splitlines())
            if ln.startswith('Parser key "') and ln.count('"') >= 2]
    if keys and keys[-1] not in text:
        text = f"{keys[-1]}: {text}"
    return text if len(text) <= MAX_LEN else text[: MAX_LEN - 3] + "..."


PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "NCCL communicator was aborted",
             "Broken pipe", "ProcessGroupNCCL's watchdog")


def _peer_lost(exc: BaseException) -> str | None:
    """One line for a collective that failed because another rank died (DDP), naming this rank and the others."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or not any(k in text for k in PEER_LOST):
        return None
    import torch.distributed as dist

    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 0)
    others = [r for r in range(world) if r != rank]
    who = f"rank {others[0]}" if len(others) == 1 else f"one of ranks {others}" if others else "another rank"
    return (f"rank {rank} stopped: {who} died or was killed during a collective (connection lost); "
            "its own log has the cause; resume with --ckpt_path <run dir>")


def describe(exc: BaseException) -> str | None:
    """``"<cause>"`` for an input error (one line), ``None`` for a bug (keep the traceback)."""
    lost = _peer_lost(root_cause(exc)) or _peer_lost(exc)
    if lost is not None:
        return lost
    cause = root_cause(exc)
    if isinstance(exc, ArgumentError) and not isinstance(cause, INPUT_ERRORS):
        cause = exc
    if not isinstance(cause, INPUT_ERRORS):
        return None
    chain, e = [], exc
    while e is not None and len(chain) < 20:
        chain.append(str(e))
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    text = one_line(str(cause) or type(cause).__name__, "\n".join(chain))
    if isinstance(cause, KeyError):
        text = text.strip("'\"")
    elif isinstance(cause, (ImportError, FileNotFoundError, PermissionError)) and type(cause).__name__ not in text:
        text = f"{type(cause).__name__}: {text}"
    return text


def run_cli(fn: Callable[[], object]) -> object:
    """Call ``fn``; an input error exits with status 2 and ``rlinf: error: <cause>`` on stderr."""
    try:
        return fn()
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - filtered below: bugs are re-raised with their traceback
        text = describe(exc)
        if text is None or os.environ.get("RLINF_TRACEBACK") == "1":
            raise
        print(f"rlinf: error: {text}", file=sys.stderr)
        raise SystemExit(2) from None
