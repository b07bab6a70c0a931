"""``rlinf plugins``: the installed plugins and what they register, without importing their classes (``--check``
imports them)."""

from __future__ import annotations

import argparse
import json
import sys

from rlinf_core.plugins.manager import BUILTIN_PLUGINS, KINDS, PluginError, load_plugins


def plugins_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlinf plugins",
        description="List installed rlinf plugins and what they "
        "register (classes are not imported; --check imports them).",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--check",
        action="store_true",
        help="also import every registered class; exit with status 1 if a plugin or class failed to load",
    )
    opts = parser.parse_args(argv)
    try:
        registry = load_plugins(warn=False)
    except PluginError as exc:
        print(f"rlinf: error: {exc}", file=sys.stderr)
        return 2
    if opts.check:
        registry.import_classes(warn=False)
    infos = list(registry.plugins.values())
    if opts.json:
        out = []
        for p in infos:
            commands = sorted(n for n, c in registry.commands.items() if c.plugin == p.name)
            out.append({**p.as_dict(), "builtin": p.name in BUILTIN_PLUGINS, "commands": commands})
        print(json.dumps(out, indent=2))
    else:
        for p in infos:
            where = "built in" if p.name in BUILTIN_PLUGINS else f"module {p.module}"
            print(f"{p.name}  ({p.distribution} {p.version}, {where})")
            if p.error:
                print(f"  ERROR: {p.error}")
            for kind in KINDS:
                names = [r.name for r in p.registered if r.kind == kind]
                if names:
                    print(f"  {kind}: {', '.join(names)}")
            commands = sorted(n for n, c in registry.commands.items() if c.plugin == p.name)
            if commands:
                print(f"  commands: {', '.join(f'rlinf {n}' for n in commands)}")
    return 1 if opts.check and registry.errors() else 0
