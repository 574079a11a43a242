"""``tessera``: the one command-line entry point.

``tessera generate --block NAME --config PRESET -o FILE.v`` writes Verilog and ``FILE.json``
(the block's parameters for software). ``tessera generate --all -o DIR`` writes every block for
every preset into ``DIR/<preset>/<block>.v``. ``tessera list`` names the blocks and presets.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import PRESET_NAMES


def generate_one(block_name: str, preset: str, out: Path) -> None:
    from .gen import to_verilog
    from .registry import get_block

    block = get_block(block_name)
    component = block.build(preset)
    top = f"tessera_{block_name}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_verilog(component, top))
    params = {"block": block_name, "preset": preset, "top": top, **block.params(preset)}
    out.with_suffix(".json").write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tessera", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write Verilog (+ JSON params) for a block and preset")
    gen.add_argument("--block", help="block name (see `tessera list`)")
    gen.add_argument("--config", default="default", choices=PRESET_NAMES, help="preset")
    gen.add_argument("--all", action="store_true", help="every block for every preset into -o DIR")
    gen.add_argument("-o", "--output", required=True, type=Path)
    sub.add_parser("list", help="list blocks and presets")
    args = parser.parse_args(argv)

    from .registry import blocks
    if args.command == "list":
        print("blocks: " + " ".join(blocks()))
        print("presets: " + " ".join(PRESET_NAMES))
        return 0
    if args.all:
        for preset in PRESET_NAMES:
            for name in blocks():
                path = args.output / preset / f"{name}.v"
                generate_one(name, preset, path)
                print(f"wrote {path}")
        return 0
    if not args.block:
        parser.error("--block is required unless --all is given")
    try:
        generate_one(args.block, args.config, args.output)
    except ValueError as exc:
        print(f"tessera: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output} and {args.output.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
