"""``rlinf maniskill-assets check|synthesize`` (also ``python -m rlinf_env_maniskill.assets_cli``): list what an asset
directory holds and lacks, or write small stand-in assets in upstream's layout (tests / CI)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rlinf_env_maniskill.assets import AssetError, listing, resolve
from rlinf_env_maniskill.synthetic_assets import write_synthetic_assets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rlinf maniskill-assets",
        description="Check (or synthesize stand-ins of) the assets of the PutOnPlateInScene25 tasks.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="list the files present and missing")
    check.add_argument("asset_dir", nargs="?", default=None, help="default: $MANISKILL_ASSET_DIR")
    check.add_argument("--bridge-dir", default=None, help="ManiSkill's data folder (default: $MS_ASSET_DIR/data)")
    check.add_argument("--plates", type=int, default=17, help="plates needed (17: every variant)")
    synth = sub.add_parser("synthesize", help="write small stand-in assets (tests / CI) into DIR")
    synth.add_argument("dir")
    args = parser.parse_args(argv)
    if args.command == "synthesize":
        out = write_synthetic_assets(Path(args.dir))
        print(f"synthetic assets in {out.asset_dir} (MANISKILL_ASSET_DIR) and {out.bridge_dir} (bridge_dir)")
        return 0
    try:
        bridge = args.bridge_dir or (
            Path(os.environ["MS_ASSET_DIR"]) / "data"
            if "MS_ASSET_DIR" in os.environ
            else Path.home() / ".maniskill" / "data"
        )
        paths = resolve(args.asset_dir, bridge)
    except AssetError as exc:
        print(f"rlinf: error: {exc}", file=sys.stderr)
        return 2
    rows = listing(paths, args.plates)
    missing = [r for r in rows if not r[1]]
    for path, ok, _ in rows:
        if not ok or len(rows) <= 40:
            print(f"{'present' if ok else 'MISSING'}  {path}")
    print(f"{len(rows) - len(missing)} present, {len(missing)} missing")
    for hint in dict.fromkeys(h for _, _, h in missing):
        print(f"get them with: {hint}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
