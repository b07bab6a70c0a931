"""Co-evolution of a policy and its world model: one config-driven loop of ordinary ``rlinf`` runs.

    rlinf coevolve --config LOOP.yaml [--rounds N] [--out_dir DIR] [--set NAME=VALUE ...]

A loop file lists *stages*; each is an ``rlinf fit`` / ``rlinf validate`` run of ordinary configs with overrides, or
any command (``run: exec``). The usual round (``docs/world_models.md``, "Co-evolution"):

1. ``collect``: ``rlinf validate`` of the current policy in the real simulator with a ``RolloutRecorder`` callback;
2. ``world_model``: ``rlinf fit`` of a ``WorldModelTrainer`` config on the recorded episodes (export directory);
3. ``reward_model``: ``rlinf fit`` of a ``RewardModelTrainer`` config on them (``resnet_rm.pth``);
4. ``rl``: ``rlinf fit`` of an RL config whose ``env`` is the ``WorldModelEnv`` on those exports and whose
   ``eval_env`` is the real simulator: the next policy, and its success in the real simulator.

Stages pass paths by variables: ``${name}`` in a stage's configs, overrides, command and outputs is a value of the
loop's ``vars`` (the starting point) or an earlier stage's ``outputs`` (the newest wins, so round r + 1 collects with
round r's policy). Built in: ``${out_dir}``, ``${round}`` (0 for the ``prelude`` stages, which run once before round
1), ``${stage_dir}`` (``OUT/round_<r>/<stage>``), ``${run_dir}`` (the stage's Lightning log dir,
``${stage_dir}/run/version_0``) and ``${python}``.

Resumable: a finished stage writes ``stage.json`` (its outputs, last eval metrics, seconds) and is never redone, so
the same command continues at the first unfinished stage (whose partial directory is cleared first), and a larger
``--rounds`` adds rounds to a finished loop. ``OUT/results.md`` tabulates every eval the stages ran.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import string
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from jsonargparse.typing import NonNegativeInt

__all__ = ["LoopSpec", "StageSpec", "coevolve_command", "load_loop", "run_loop"]

RUNS = ("fit", "validate", "exec")
LAUNCHERS = ("subprocess", "in_process")
REPORTED = ("eval/success_once", "eval/return")


class LoopError(ValueError):
    """Bad loop file or a failed stage (one line)."""


@dataclass
class StageSpec:
    """One stage of the loop.

    Args:
        name: the stage's name (its directory ``round_<r>/<name>``).
        run: ``fit`` / ``validate`` (an rlinf run) or ``exec`` (``command``).
        config: config files (or shipped names) for ``fit`` / ``validate``, layered in order.
        args: overrides ``{key: value}`` (``model.init_args.data_path: ${rollouts}``) for ``fit`` / ``validate``;
            non-string values are passed as JSON.
        command: the argv of an ``exec`` stage.
        outputs: ``{name: path template}`` this stage produces; each must exist after it and becomes a variable.
        feeds_next_round: run only when another round follows (a ``collect`` at the end of a round, for the next).
    """

    name: str
    run: Literal["fit", "validate", "exec"] = "fit"
    config: list[str] | str = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    feeds_next_round: bool = False


@dataclass
class LoopSpec:
    """A co-evolution loop (the loop file's schema).

    Args:
        out_dir: where every stage's directory, ``coevolve.json`` and ``results.md`` go.
        rounds: rounds of ``stages`` (after the ``prelude``).
        launcher: ``subprocess`` (each rlinf run in its own process: memory and CUDA state never carry over) or
            ``in_process`` (fast, for tests and small runs; run through the ``rlinf`` command, else as subprocesses).
        vars: starting values of the variables (``policy: path/to/sft_policy``).
        prelude: stages run once before round 1 (``${round}`` = 0), e.g. the starting policy's eval.
        stages: the stages of every round, in order.
        note: what the loop shows (printed when it starts and ends), e.g. that a toy loop checks the plumbing.
    """

    out_dir: str = "runs/coevolve"
    rounds: NonNegativeInt = 1
    launcher: Literal["subprocess", "in_process"] = "subprocess"
    vars: dict[str, Any] = field(default_factory=dict)
    prelude: list[dict[str, Any]] = field(default_factory=list)  # StageSpec mappings, each checked on its own
    stages: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""


def _fields(cls) -> list[str]:
    return list(cls.__dataclass_fields__)


def _one_line(exc: Exception, keys_of: type) -> str:
    """jsonargparse's nested message as one line: ``key: what is wrong`` (its three wordings for unknown keys,
    out-of-range numbers and choices are rephrased; anything else is its innermost line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    keys = [ln.split('"')[1] for ln in lines if ln.startswith('Parser key "')]
    text = next((ln for ln in reversed(lines) if not ln.startswith(("Parser key", "Problem with"))), lines[-1])
    unknown = re.match(r"Option '(.+)' is not accepted", text)
    if unknown:
        return f"unknown key {unknown.group(1)!r}; {keys_of.__name__.removesuffix('Spec').lower()} keys: " + ", ".join(
            _fields(keys_of)
        )
    choice = re.match(r"Expected a typing.Literal\[(.*)\]. Got value: (.*)", text)
    if choice:
        text = f"must be one of {choice.group(1).replace(chr(39), '')}, got {choice.group(2)!r}"
    bound = re.match(r"Not of type NonNegativeInt: (.*) does not conform", text)
    if bound:
        text = f"must be an integer >= 0, got {bound.group(1)}"
    if not keys:
        return text
    return f"{keys[-1]} {text}" if text.startswith("must be") else f"{keys[-1]}: {text}"


def _parse(cls: type, raw: dict[str, Any], where: str) -> Any:
    """``cls(**raw)`` after jsonargparse checked the keys and types against ``cls``'s fields."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls)
    try:
        parsed = parser.parse_object(raw)
    except Exception as exc:  # noqa: BLE001 - jsonargparse's ArgumentError / ValueError: bad input, one line
        raise LoopError(f"{where}: {_one_line(exc, cls)}") from None
    return cls(**{k: v for k, v in parsed.as_dict().items() if k in _fields(cls)})


def _stage(raw: Any, where: str) -> StageSpec:
    if not isinstance(raw, dict) or "name" not in raw:
        raise LoopError(f"{where}: a stage is a mapping with a 'name' (keys: {', '.join(_fields(StageSpec))})")
    st = _parse(StageSpec, raw, f"{where} ({raw['name']})")
    st.config = [st.config] if isinstance(st.config, str) else list(st.config or [])
    if st.run == "exec" and not st.command:
        raise LoopError(f"{where} ({st.name}): an exec stage needs a command (a list of arguments)")
    if st.run != "exec" and not st.config:
        raise LoopError(f"{where} ({st.name}): a {st.run} stage needs a config (a file or a shipped name)")
    if not str(st.name).replace("_", "").replace("-", "").isalnum():
        raise LoopError(f"{where}: stage name {st.name!r} must be letters, digits, '_' or '-' (it names a directory)")
    return st


def load_loop(path: str | Path, overrides: dict[str, Any] | None = None) -> LoopSpec:
    """The loop file at ``path`` with top-level ``overrides`` (``rounds``, ``out_dir``, ``launcher``) applied.

    Keys and types are checked by jsonargparse against :class:`LoopSpec` / :class:`StageSpec` (the schema);
    what types cannot say (a config per fit stage, unique stage names) is checked here."""
    path = Path(path)
    if not path.is_file():
        raise LoopError(f"loop file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise LoopError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise LoopError(f"{path}: a loop file is a mapping (keys: {', '.join(_fields(LoopSpec))})")
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    spec = _parse(LoopSpec, raw, str(path))
    spec.prelude = [_stage(s, f"{path} prelude[{i}]") for i, s in enumerate(spec.prelude or [])]
    spec.stages = [_stage(s, f"{path} stages[{i}]") for i, s in enumerate(spec.stages or [])]
    for names in ([s.name for s in spec.prelude], [s.name for s in spec.stages]):
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise LoopError(f"{path}: two stages are named {dup!r} (each needs its own directory)")
    return spec


def substitute(value: Any, ctx: dict[str, Any], where: str) -> str:
    """``value`` as a command-line string with ``${name}`` replaced from ``ctx`` (``$$`` is a literal ``$``)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value)
    try:
        return string.Template(text).substitute({k: "null" if v is None else str(v) for k, v in ctx.items()})
    except KeyError as exc:
        raise LoopError(f"{where}: unknown variable ${{{exc.args[0]}}}; known: {', '.join(sorted(ctx))}") from None
    except ValueError as exc:
        raise LoopError(f"{where}: bad '$' in {text!r} ({exc}); write $$ for a literal '$'") from None


def stage_argv(stage: StageSpec, ctx: dict[str, Any], where: str) -> list[str]:
    """The stage's command: ``["rlinf", "fit", "--config", ...]`` or its ``exec`` argv, variables filled in."""
    if stage.run == "exec":
        return [substitute(a, ctx, f"{where} command") for a in stage.command]
    argv = ["rlinf", stage.run]
    for c in stage.config:
        argv += ["--config", substitute(c, ctx, f"{where} config")]
    for key, value in stage.args.items():
        argv.append(f"--{str(key).lstrip('-')}={substitute(value, ctx, f'{where} args.{key}')}")
    run_dir = Path(ctx["run_dir"])  # last: the stage's run directory is the loop's, whatever the config says
    argv += [
        f"--trainer.logger.init_args.save_dir={run_dir.parents[1]}",
        f"--trainer.logger.init_args.name={run_dir.parent.name}",
        "--trainer.logger.init_args.version=0",
    ]
    return argv


def _launch_subprocess(argv: list[str], log: Path) -> int:
    cmd = [sys.executable, "-m", "rlinf_core.cli.main", *argv[1:]] if argv[0] == "rlinf" else argv
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ}).returncode


def _launch_in_process(argv: list[str], log: Path, main: Callable[[list[str]], Any]) -> int:
    if argv[0] != "rlinf":
        return _launch_subprocess(argv, log)
    with open(log, "a") as f, redirect_stdout(f), redirect_stderr(f):
        print("$ " + " ".join(argv), flush=True)
        try:
            main(argv[1:])
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
        except Exception:  # noqa: BLE001 - a stage's bug is reported like a failed subprocess, traceback in its log
            import traceback

            traceback.print_exc()
            return 1
    return 0


def last_eval(run_dir: Path) -> dict[str, Any] | None:
    """The newest ``eval/eval_epoch<N>.json`` a run wrote (``None``: it evaluated nothing)."""
    files = sorted((run_dir / "eval").glob("eval_epoch*.json"), key=lambda p: int(p.stem.split("epoch")[1]))
    return json.loads(files[-1].read_text()) if files else None


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def installed_rlinf_main() -> Callable[[list[str]], Any]:
    """The installed ``rlinf`` command's function (its console-script entry point), to run ``rlinf ARGS`` in this
    process: the same command the subprocess launcher runs, without this module importing the one that
    dispatches to it."""
    from importlib.metadata import entry_points

    found = entry_points(group="console_scripts", name="rlinf")
    if not found:
        raise LoopError("launcher: in_process needs the rlinf command installed (pip install rlinf-core)")
    return next(iter(found)).load()


def run_loop(
    spec: LoopSpec, log: Callable[[str], None] = print, rlinf_main: Callable[[list[str]], Any] | None = None
) -> list[dict[str, Any]]:
    """Run (or continue) the loop; returns one record per stage (``round``, ``stage``, ``outputs``, ``eval``, ...).

    ``rlinf_main`` runs ``rlinf ARGS`` in this process (``launcher: in_process``; default: the installed ``rlinf``
    command, :func:`installed_rlinf_main`).
    """
    out = Path(spec.out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if spec.launcher == "subprocess":
        launch = _launch_subprocess
    else:
        launch = functools.partial(_launch_in_process, main=rlinf_main or installed_rlinf_main())
    values: dict[str, Any] = dict(spec.vars)
    plan = [(0, s) for s in spec.prelude] + [
        (r, s) for r in range(1, spec.rounds + 1) for s in spec.stages if r < spec.rounds or not s.feeds_next_round
    ]
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    try:
        for rnd, stage in plan:
            stage_dir = out / f"round_{rnd}" / stage.name
            where = f"round {rnd} stage {stage.name}"
            ctx = {
                **values,
                "out_dir": str(out),
                "round": rnd,
                "stage_dir": str(stage_dir),
                "run_dir": str(stage_dir / "run" / "version_0"),
                "python": sys.executable,
            }
            argv = stage_argv(stage, ctx, where)
            marker = stage_dir / "stage.json"
            if marker.is_file():
                rec = json.loads(marker.read_text())
                if rec.get("argv") != argv:
                    log(
                        f"coevolve: {where}: finished earlier with other arguments; kept (delete {stage_dir} "
                        "to redo it)"
                    )
                else:
                    log(f"coevolve: {where}: done earlier, skipped")
                values.update(rec["outputs"])
                records.append(rec)
                continue
            if stage_dir.exists():  # an interrupted attempt: start it again from nothing
                shutil.rmtree(stage_dir)
            stage_dir.mkdir(parents=True)
            log(f"coevolve: {where}: {' '.join(argv[:2])} ... (log: {stage_dir / 'log.txt'})")
            t = time.perf_counter()
            code = launch(argv, stage_dir / "log.txt")
            if code != 0:
                tail = (stage_dir / "log.txt").read_text().strip().splitlines()[-1:] or [""]
                raise LoopError(
                    f"{where} failed (exit {code}): {tail[0][:300]} (log: {stage_dir / 'log.txt'}); "
                    "run the same command again to retry from this stage"
                )
            outputs = {k: substitute(v, ctx, f"{where} outputs.{k}") for k, v in stage.outputs.items()}
            missing = [f"{k}={v}" for k, v in outputs.items() if not Path(v).exists()]
            if missing:
                raise LoopError(
                    f"{where} finished but did not write its output {missing[0]} (log: {stage_dir / 'log.txt'})"
                )
            result = last_eval(Path(ctx["run_dir"])) if stage.run != "exec" else None
            rec = {
                "round": rnd,
                "stage": stage.name,
                "argv": argv,
                "outputs": outputs,
                "seconds": time.perf_counter() - t,
                "eval": result["metrics"] if result else None,
                "per_task": result.get("per_task") if result else None,
            }
            _write_json(marker, rec)
            values.update(outputs)
            records.append(rec)
            shown = {k: round(v, 4) for k, v in (rec["eval"] or {}).items() if k in REPORTED}
            log(f"coevolve: {where}: done in {rec['seconds']:.0f} s" + (f"; {shown}" if shown else ""))
    finally:  # also after a failed stage: what finished so far
        _write_json(out / "coevolve.json", {"records": records, "vars": values})
        (out / "results.md").write_text(results_table(records, time.perf_counter() - t0))
    return records


def results_table(records: list[dict[str, Any]], seconds: float) -> str:
    """Markdown: every stage that evaluated (round, stage, success, return), and the time of each stage."""
    lines = [
        "# rlinf coevolve",
        "",
        "| round | stage | eval/success_once | eval/return | episodes |",
        "|---|---|---|---|---|",
    ]
    for r in records:
        m = r.get("eval") or {}
        if m:
            success, ret = m.get("eval/success_once", float("nan")), m.get("eval/return", float("nan"))
            n = int(m.get("eval/num_trajectories", 0))
            lines.append(f"| {r['round']} | {r['stage']} | {100 * success:.1f}% | {ret:.3f} | {n} |")
    lines += ["", "| round | stage | seconds |", "|---|---|---|"]
    lines += [f"| {r['round']} | {r['stage']} | {r['seconds']:.0f} |" for r in records]
    lines += ["", f"This invocation: {seconds:.0f} s (stages done earlier were skipped).", ""]
    return "\n".join(lines)


def coevolve_command(argv: list[str]) -> int:
    """``rlinf coevolve``: parse, run the loop, print where the results are; bad input is one line, exit 2."""
    p = argparse.ArgumentParser(
        prog="rlinf coevolve",
        description="Run (or continue) a co-evolution loop of rlinf stages: collect -> world "
        "model + reward model -> RL in the world model -> eval.",
    )
    p.add_argument("--config", "-c", required=True, help="the loop file (or a shipped name, e.g. toy/coevolve.yaml)")
    p.add_argument("--rounds", type=int, default=None, help="rounds (overrides the file; larger continues a loop)")
    p.add_argument("--out_dir", default=None, help="results directory (overrides the file)")
    p.add_argument("--launcher", choices=LAUNCHERS, default=None, help="overrides the file")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a starting variable (repeatable)")
    opts = p.parse_args(argv)
    try:
        spec = load_loop(opts.config, {"rounds": opts.rounds, "out_dir": opts.out_dir, "launcher": opts.launcher})
        for item in opts.set:
            if "=" not in item:
                raise LoopError(f"--set {item!r}: expected NAME=VALUE")
            name, value = item.split("=", 1)
            spec.vars[name] = value
        if spec.note:
            print(f"coevolve: {spec.note.strip()}", flush=True)
        records = run_loop(spec)
    except LoopError as exc:
        print(f"rlinf coevolve: error: {exc}", file=sys.stderr)
        return 2
    out = Path(spec.out_dir).resolve()
    print(f"coevolve: {len(records)} stages done; results: {out / 'results.md'}")
    if spec.note:
        print(f"coevolve: {spec.note.strip()}")
    return 0
