"""Docs that show a config show the file: a YAML block marked ``<!-- file: PATH -->`` is PATH verbatim, and a
whole config (top-level ``seed_everything:``) shown anywhere in the docs must carry that mark, unless it is a file of
docs/plugin_tutorial.md's tutorial (first line ``# file: ...``), which tests/core/test_plugin_tutorial.py writes out and
runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("plugins/*/README.md"))]
BLOCK = re.compile(r"(?:<!-- file: (?P<path>\S+) -->\n)?```ya?ml\n(?P<body>.*?)```", re.S)


def yaml_blocks(doc: Path) -> list[tuple[int, str | None, str]]:
    """(line, marked file or None, text) of every YAML block in ``doc``."""
    text = doc.read_text()
    return [(text[: m.start()].count("\n") + 1, m.group("path"), m.group("body")) for m in BLOCK.finditer(text)]


MARKED = [(doc, line, path, body) for doc in DOCS for line, path, body in yaml_blocks(doc) if path]


def test_the_readme_walk_through_is_marked():
    assert any(doc.name == "README.md" and path == "configs/toy/reach_grpo.yaml" for doc, _, path, _ in MARKED)


@pytest.mark.parametrize("doc,line,path,body", MARKED, ids=[f"{d.relative_to(ROOT)}:{n}" for d, n, _, _ in MARKED])
def test_a_marked_block_is_the_file(doc, line, path, body):
    shipped = (ROOT / path).read_text()
    assert body == shipped, f"{doc.relative_to(ROOT)}:{line} differs from {path}; paste the file again"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_a_whole_config_shown_in_the_docs_names_its_file(doc):
    for line, path, body in yaml_blocks(doc):
        if re.search(r"^seed_everything:", body, re.M) and not body.startswith("# file: "):
            assert path, f"{doc.relative_to(ROOT)}:{line} shows a whole config: mark it <!-- file: configs/... -->"


def test_the_check_catches_a_drifted_copy(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("<!-- file: configs/toy/reach_grpo.yaml -->\n```yaml\nseed_everything: 0\n```\n")
    [(line, path, body)] = yaml_blocks(doc)
    assert path == "configs/toy/reach_grpo.yaml" and body != (ROOT / path).read_text()


RUN_OUTPUT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d |^rlinf: fit finished", re.M)


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_a_run_output_shown_in_the_docs_says_how_it_was_made(doc):
    """A block with a run's log lines or summary names, in the text just before it, the commit it ran at."""
    text = doc.read_text()
    for m in re.finditer(r"```\w*\n(.*?)```", text, re.S):
        if RUN_OUTPUT.search(m.group(1)):
            before = text[max(0, m.start() - 800) : m.start()]
            line = text[: m.start()].count("\n") + 1
            assert re.search(r"commit [0-9a-f]{7}|same run", before), (
                f"{doc.relative_to(ROOT)}:{line} shows a run's output without the commit and command that made it"
            )


def test_package_long_descriptions_have_no_escaped_newlines():
    """The README each pyproject names as its long description is Markdown, not a string literal with ``\\n``."""
    import tomllib

    for pyproject in [ROOT / "core" / "pyproject.toml", *sorted(ROOT.glob("plugins/*/pyproject.toml"))]:
        readme = tomllib.loads(pyproject.read_text())["project"].get("readme")
        if isinstance(readme, str):
            text = re.sub(r"```.*?```|`[^`]*`", "", (pyproject.parent / readme).read_text(), flags=re.S)  # code
            assert "\\n" not in text, f"{(pyproject.parent / readme).relative_to(ROOT)} holds a literal \\n"
