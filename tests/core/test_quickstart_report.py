"""The README's quickstart table comes from the quickstart itself: its header is the one
``scripts/quickstart.py`` writes, and its seed-0 row is the row of the run recorded in docs/quickstart_runs/."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["button-press-topdown-v3", "drawer-close-v3"]


def _quickstart():
    spec = importlib.util.spec_from_file_location("quickstart_script", ROOT / "scripts" / "quickstart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(per_task: dict[str, float]) -> dict:
    return {"per_task": {t: {"success_once": v} for t, v in per_task.items()},
            "metrics": {"eval/success_once": sum(per_task.values()) / len(per_task)}}  # fmt: skip


def test_readme_row_format():
    header, row = _quickstart().readme_row(0, TASKS, _result(dict(zip(TASKS, (0.3, 0.5)))),
                                           _result(dict(zip(TASKS, (0.4, 1.0)))), 546.0, "AMD EPYC, AVX2")  # fmt: skip
    assert row == "| 0 | 30% → 40% | 50% → 100% | **40.0% → 70.0%** | **+30.0** | 9 min 6 s | AMD EPYC, AVX2 |"
    assert header.splitlines()[0].startswith("| seed | button-press-topdown: SFT → SFT+GRPO | drawer-close:")


def test_the_readme_table_is_the_quickstarts():
    readme = (ROOT / "README.md").read_text()
    header, _ = _quickstart().readme_row(
        0, TASKS, _result(dict.fromkeys(TASKS, 0.0)), _result(dict.fromkeys(TASKS, 0.0)), 0, ""
    )
    assert header in readme, "the README's quickstart table header is not the one scripts/quickstart.py writes"
    recorded = (ROOT / "docs" / "quickstart_runs" / "seed0.md").read_text()
    [row] = re.findall(r"^\| 0 \|.*$", recorded.split("## README row")[1], re.M)
    # a row recorded before the quickstart wrote its CPU column: the README adds that cell (the record names the CPU)
    lines = readme.splitlines()
    assert any(line == row or line.startswith(row + " ") for line in lines), f"the README lacks the recorded row: {row}"


def test_docs_quickstart_states_the_recorded_changes():
    """docs/quickstart.md's current figures are the recorded runs' (their README rows), seed by seed."""
    doc = (ROOT / "docs" / "quickstart.md").read_text()
    for recorded in sorted((ROOT / "docs" / "quickstart_runs").glob("seed*.md")):
        seed = int(recorded.stem.removeprefix("seed"))
        [row] = re.findall(rf"^\| {seed} \|.*$", recorded.read_text().split("## README row")[1], re.M)
        change = re.findall(r"\*\*([+-][\d.]+)\*\*", row)[-1]
        assert f"{change} (seed {seed})" in doc, f"docs/quickstart.md lacks seed {seed}'s {change}"
