"""No import circles anywhere: the module import graph of the core and every plugin is acyclic, and so is the graph
of their folders (packages).

Edges are every import a module names: at import time, inside a function (a lazy import that closes a circle is
still a circle in the design) and under ``if TYPE_CHECKING:`` (an annotation that needs a circle is one too).
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``. A folder edge joins the
folders of two modules that import each other's folder (``rlinf_core.rl.module`` -> ``rlinf_core.rl.algorithms.base``:
``rlinf_core.rl`` -> ``rlinf_core.rl.algorithms``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = [ROOT / "core" / "src", *sorted((ROOT / "plugins").glob("*/src"))]


def _modules() -> dict[str, Path]:
    out = {}
    for src in SOURCE_ROOTS:
        for path in src.rglob("*.py"):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """``(base, names)`` per import statement (``TYPE_CHECKING`` blocks included)."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            found.append((base, [alias.name for alias in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, set())
        for base, names in _imports(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules] or [base]
            if len(targets) < len(names) and base in modules:
                targets.append(base)
            edges.update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = dfs(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = dfs(node)
            if cycle:
                return cycle
    return None


def all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return out


def test_the_checker_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    from . import y\n"
    )
    assert _imports(tree, "pkg.mod", False) == [("typing", ["TYPE_CHECKING"]), ("x", []), ("pkg", ["y"])]
    modules = {"p.a": Path("p/a.py"), "p.sub.b": Path("p/sub/b.py"), "p.sub": Path("p/sub/__init__.py")}
    # no module circle, but p -> p.sub -> p: a folder circle
    assert find_cycle(folder_graph({"p.a": {"p.sub.b"}, "p.sub.b": set(), "p.sub": {"p.a"}}, modules)) == [
        "p",
        "p.sub",
        "p",
    ]


def test_graph_covers_core_and_plugins():
    graph = import_graph()
    assert "rlinf_core.contracts.env" in graph and "rlinf_core.envs.vector.workers" in graph
    assert "rlinf_core.contracts.observation" in graph["rlinf_core.contracts.env"]
    assert any(name.startswith("rlinf_policy_openpi.") for name in graph)


def test_no_import_cycles():
    cycles = all_cycles(import_graph())
    assert not cycles, "import circles (each line: modules that import each other in a circle):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def _folder(module: str, modules: dict[str, Path]) -> str:
    """The package a module lives in (a package's ``__init__`` belongs to the package itself)."""
    return module if modules[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def folder_graph(graph: dict[str, set[str]], modules: dict[str, Path]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = _folder(module, modules)
        out.setdefault(here, set()).update(_folder(t, modules) for t in targets if _folder(t, modules) != here)
    return out


def test_no_folder_cycles():
    """Folders form floors: no package imports (through any of its modules) a package that imports it back."""
    cycles = all_cycles(folder_graph(import_graph(), _modules()))
    assert not cycles, "folder circles (each line: packages whose modules import each other's):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_the_documented_layers_form_floors():
    """docs/architecture.md's table itself allows no circle between layers."""
    table = documented_layers()
    cycles = all_cycles({layer: allowed & set(table) for layer, allowed in table.items()})
    assert not cycles, f"docs/architecture.md's table allows circles: {cycles}"


def documented_layers() -> dict[str, set[str]]:
    """docs/architecture.md's "What may import what" table: layer -> layers it may import."""
    table: dict[str, set[str]] = {}
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## What may import what", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            table[cells[0].strip("`")] = {c.strip().strip("`") for c in cells[1].split(",") if c.strip()}
    return table


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "rlinf_core":
        return None
    return parts[1] if len(parts) > 1 else "(root)"


def test_layers_import_only_what_docs_architecture_allows():
    allowed = documented_layers()
    core = {_layer(m) for m in import_graph() if _layer(m)}
    assert core <= set(allowed), f"layers missing from docs/architecture.md's table: {sorted(core - set(allowed))}"
    bad = []
    for module, targets in sorted(import_graph().items()):
        here = _layer(module)
        for target in sorted(targets):
            there = _layer(target)
            if here and there and here != there and there not in allowed[here]:
                bad.append(f"{module} -> {target}")
    assert not bad, "imports between layers that docs/architecture.md does not allow:\n" + "\n".join(bad)


PLUGIN_REFERENCE = ROOT / "docs" / "plugin_reference.md"


def plugin_import_table() -> dict[str, str]:
    """docs/plugin_reference.md's "Where plugins import from" table, the rule itself: place -> what it holds.

    A place ``pkg.<module>`` means any module of ``pkg`` (``rlinf_core.models.<module>``: ``rlinf_core.models.lora``).
    """
    section = PLUGIN_REFERENCE.read_text().split("## Where plugins import from", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(rlinf_core[\w.<>]*)` \| (.*) \|$", section, re.M)
    return dict(rows)


#: where plugin source code may import the core from, as the reference's table says (``pkg.*``: any module of pkg)
PLUGIN_IMPORT_PLACES = tuple(place.replace(".<module>", ".*") for place in plugin_import_table())


def _allowed_for_plugins(module: str) -> bool:
    return any(module == p or (p.endswith(".*") and module.startswith(p[:-1])) for p in PLUGIN_IMPORT_PLACES)


def test_plugin_sources_import_the_core_only_from_the_documented_places():
    bad = []
    for src in SOURCE_ROOTS[1:]:
        for path in src.rglob("*.py"):
            module = ".".join(path.relative_to(src).with_suffix("").parts)
            for base, names in _imports(ast.parse(path.read_text()), module, path.name == "__init__.py"):
                if base.split(".")[0] == "rlinf_core" and not _allowed_for_plugins(base):
                    bad.append(f"{path.relative_to(ROOT)}: from {base} import {', '.join(names)}")
    assert not bad, "plugins must import the core from " + ", ".join(PLUGIN_IMPORT_PLACES) + ":\n" + "\n".join(bad)


def _public_modules(package: str) -> set[str]:
    folder = ROOT / "core" / "src" / Path(*package.split("."))
    return {p.stem for p in folder.glob("[a-z]*.py")} | {
        p.name for p in folder.iterdir() if (p / "__init__.py").is_file()
    }


def test_the_plugin_import_table_names_what_each_place_holds():
    """Each name in the table's second column is there: an attribute of a package place; for a ``<module>`` place, a
    module of the package (all of them listed) or a name one of its modules defines."""
    table = plugin_import_table()
    assert {"rlinf_core", "rlinf_core.contracts", "rlinf_core.models.<module>"} <= set(table), sorted(table)
    missing = []
    for place, what in table.items():
        names = [n for n in re.findall(r"`(\w+)`", what) if not n.startswith("__")]
        if place.endswith(".<module>"):
            package = place.removesuffix(".<module>")
            modules = _public_modules(package)
            listed = {n for n in names if n in modules}
            missing += [f"{package}.{m} (not listed)" for m in sorted(modules - listed)]
            loaded = [importlib.import_module(f"{package}.{m}") for m in sorted(listed)]
            missing += [f"{place}: {n}" for n in names if n not in modules and not any(hasattr(m, n) for m in loaded)]
        else:
            module = importlib.import_module(place)
            missing += [f"{place}: {n}" for n in names if not hasattr(module, n)]
    assert not missing, "docs/plugin_reference.md's import table names what is not there:\n" + "\n".join(missing)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a name inside a module, not a module
        return False


#: core modules the plugin pages name although plugins do not import them: sources to read, and the command's entry
NAMED_NOT_IMPORTED = ("rlinf_core.builtin", "rlinf_core.cli.main")


def test_the_plugin_pages_name_the_core_only_at_the_documented_places():
    """A dotted ``rlinf_core....`` in the plugin pages' prose is an import place (or a name in one)."""
    bad = []
    for page in sorted((ROOT / "docs").glob("plugin_*.md")):
        for dotted in sorted(set(re.findall(r"`(rlinf_core(?:\.\w+)*)", page.read_text()))):
            parts = dotted.split(".")
            candidates = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
            module = next(c for c in candidates if _is_module(c))
            package_of_a_place = f"{module}.*" in PLUGIN_IMPORT_PLACES  # "the modules of rlinf_core.models"
            if not (_allowed_for_plugins(module) or package_of_a_place or module.startswith(NAMED_NOT_IMPORTED)):
                bad.append(f"{page.name}: {dotted}")
    assert not bad, "the plugin pages name core modules that are not import places:\n" + "\n".join(bad)
