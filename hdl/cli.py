"""``tessera``: the one command-line entry point.

``tessera generate --block NAME --config PRESET -o FILE.v`` writes Verilog and ``FILE.json``
(the block's parameters for software). ``tessera generate --all -o DIR`` writes every block for
every preset into ``DIR/<preset>/<block>.v``; ``--target ecp5`` uses Lattice ECP5 primitives
where a block has them (:data:`hdl.gen.TARGETS`). ``tessera list`` names the blocks and presets.
``tessera compile --layers 64,64,10 --batch 32 --optimizer adam --report`` compiles an MLP
training step for the training core and prints its memory plan (:mod:`sim.host.compiler`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import PRESET_NAMES
from .gen import TARGETS


def generate_one(block_name: str, preset: str, out: Path, target: str = "generic") -> None:
    from .gen import to_verilog
    from .registry import get_block

    block = get_block(block_name)
    component = block.build(preset)
    top = f"tessera_{block_name}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_verilog(component, top, target))
    params = {"block": block_name, "preset": preset, "top": top, **block.params(preset)}
    if target != "generic":
        params["target"] = target
    # modules the top instantiates several times by name (e.g. the ring's cores): a simulator
    # build keeps them as modules (sim.tb.runner: Verilator's no_inline) to compile them once
    shared = [name for name, _ in getattr(component, "verilog_modules", ())]
    if shared:
        params["shared_modules"] = shared
    out.with_suffix(".json").write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")


def _floats(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _add_compile_parser(sub) -> None:
    comp = sub.add_parser("compile", help="compile an MLP training step for the training core "
                                          "and print its memory plan")
    comp.add_argument("--layers", default="64,64,10",
                      help="sizes input,hidden...,classes (default 64,64,10)")
    comp.add_argument("--batch", type=int, default=32, help="rows per step (default 32)")
    comp.add_argument("--optimizer", default="adam", choices=("sgd", "momentum", "adam", "adamw"))
    comp.add_argument("--lr", type=_floats, help="learning rate (default 0.01 for sgd/momentum, "
                                                 "0.001 for adam/adamw)")
    comp.add_argument("--momentum", type=_floats, default=0.9, help="momentum (default 0.9)")
    comp.add_argument("--weight-decay", type=_floats, default=0.01,
                      help="AdamW decoupled weight decay (default 0.01)")
    comp.add_argument("--micro-batches", type=int, default=1, help="k micro-batches (default 1)")
    comp.add_argument("--checkpoint", default="none",
                      help="hidden activations to recompute: e.g. 1,2 | all | none (default)")
    comp.add_argument("--schedule", default="listed", choices=("listed", "overlap"),
                      help="backward instruction order (default listed)")
    comp.add_argument("--clip", type=_floats, help="clip gradients to this global norm")
    comp.add_argument("--loss-scale", type=int, nargs="?", const=16, metavar="INIT_EXP",
                      help="dynamic loss scaling starting at 2**INIT_EXP (default 16)")
    comp.add_argument("--config", default="default", choices=PRESET_NAMES,
                      help="CoreConfig preset (default: default)")
    comp.add_argument("--banks", type=int, help="override CoreConfig.banks")
    comp.add_argument("--bank-depth", type=int, help="override CoreConfig.bank_depth")
    comp.add_argument("--report", action="store_true",
                      help="full report: lines per bank, the tensors, and the plan without "
                           "checkpointing when checkpointing is requested")
    comp.add_argument("--json", type=Path, help="write description, report, plan and program")
    comp.add_argument("--asm", type=Path, help="write the program as commented assembly")


def _describe(args):
    import dataclasses

    from hdl.core.config import CoreConfig
    from sim.host.compiler import MLP
    from sim.host.optim import SGD, Adam, AdamW, Clip, LossScale, Momentum

    try:
        layers = tuple(int(v) for v in args.layers.split(","))
    except ValueError:
        raise ValueError(f"--layers must be comma-separated ints, not {args.layers!r}") from None
    lr = args.lr
    opt = {"sgd": lambda: SGD(0.01 if lr is None else lr),
           "momentum": lambda: Momentum(0.01 if lr is None else lr, args.momentum),
           "adam": lambda: Adam(1e-3 if lr is None else lr),
           "adamw": lambda: AdamW(1e-3 if lr is None else lr, weight_decay=args.weight_decay),
           }[args.optimizer]()
    ck = args.checkpoint.strip().lower()
    if ck == "all":
        ck = tuple(range(1, len(layers) - 1))
    elif ck not in ("", "none", "off"):
        try:
            ck = tuple(int(v) for v in ck.split(","))
        except ValueError:
            raise ValueError(f"--checkpoint must be hidden-layer indices like 1,2, 'all' or "
                             f"'none', not {args.checkpoint!r}") from None
    desc = MLP(layers=layers, batch=args.batch, optimizer=opt,
               loss_scale=None if args.loss_scale is None else LossScale(args.loss_scale),
               clip=None if args.clip is None else Clip(args.clip),
               micro_batches=args.micro_batches, checkpoint=ck, schedule=args.schedule)
    config = CoreConfig.preset(args.config)
    over = {k: v for k, v in (("banks", args.banks), ("bank_depth", args.bank_depth))
            if v is not None}
    if over:
        config = dataclasses.replace(config, **over)
    return desc, config


_ROWS = (("weights", "weights"), ("activations", "activations"), ("gradients", "gradients"),
         ("optimizer_state", "optimizer state"), ("data", "data (x, labels, loss)"),
         ("total", "total"))


def _report_table(columns) -> list[str]:
    """``columns``: [(title, report dict)] -> lines of a words table."""
    width = max(len(t) for t, _ in columns)
    w = max(width, 12)
    out = [f"  {'FP32 words':<24}" + "".join(f"{t:>{w + 2}}" for t, _ in columns)]
    for key, label in _ROWS:
        out.append(f"  {label:<24}" + "".join(f"{r[key]:>{w + 2},}" for _, r in columns))
    out.append(f"  {'peak live activations':<24}"
               + "".join(f"{r['activation_peak_live_words']:>{w + 2},}" for _, r in columns))
    return out


def compile_command(args) -> int:
    from sim.host.compiler import compile_mlp

    desc, config = _describe(args)
    comp = compile_mlp(desc, config)
    rep = comp.report()
    print(f"tessera compile: {desc.describe()}")
    print(f"CoreConfig {args.config}: S={config.size}, {config.banks} banks x "
          f"{config.bank_depth} lines ({config.words:,} FP32 words), program "
          f"{rep['instructions']}/{config.prog_depth} instructions")
    columns = [("checkpoint " + (",".join(map(str, sorted(desc.checkpoint))) or "none"), rep)]
    plain = None
    if args.report and desc.checkpoint:
        plain = compile_mlp(desc.replace(checkpoint=()), config)
        columns.append(("no checkpoint", plain.report()))
    print("memory plan")
    for line in _report_table(columns):
        print(line)
    if args.report:
        for title, r in columns:
            print(f"lines per bank ({title}): {r['lines_per_bank']} of {config.bank_depth}")
        print(f"overlappable instruction pairs (matmul / vector unit): {rep['overlap_pairs']}, "
              f"on disjoint banks: {rep['overlap_pairs_disjoint_banks']}; recompute passes: "
              f"{rep['recompute_passes']}")
        print("tensors")
        for name, t in comp.plan.items():
            extra = f" x{t.count} stride {t.stride}" if t.count > 1 else ""
            live = f" live {t.live[0]}..{t.live[1]}" if t.live else ""
            print(f"  {name:<10} {t.kind:<16} bank {t.bank:>2} line 0x{t.line:04x} "
                  f"{t.lines:>5} lines {t.rows:>5} x {t.cols:<5}{extra}{live}")
    if args.asm:
        args.asm.parent.mkdir(parents=True, exist_ok=True)
        args.asm.write_text(comp.asm())
        print(f"wrote {args.asm}")
    if args.json:
        doc = {"description": desc.describe(), "layers": list(desc.layers),
               "batch": desc.batch, "micro_batches": desc.micro_batches,
               "checkpoint": sorted(desc.checkpoint), "schedule": desc.schedule,
               "config": config.to_dict(), "report": rep,
               "plan": {n: t.as_dict() for n, t in comp.plan.items()},
               "program": [f"0x{w:032x}" for w in comp.program]}
        if plain is not None:
            doc["report_without_checkpoint"] = plain.report()
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tessera", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write Verilog (+ JSON params) for a block and preset")
    gen.add_argument("--block", help="block name (see `tessera list`)")
    gen.add_argument("--config", default="default", choices=PRESET_NAMES, help="preset")
    gen.add_argument("--all", action="store_true", help="every block for every preset into -o DIR")
    gen.add_argument("-o", "--output", required=True, type=Path)
    gen.add_argument("--target", default="generic", choices=TARGETS,
                     help="generic: Amaranth logic only (simulators, any FPGA); ecp5: Lattice "
                          "ECP5 primitives where a block has them (registered DSP blocks)")
    sub.add_parser("list", help="list blocks and presets")
    _add_compile_parser(sub)
    from sim.host import train as _train
    _train.add_parser(sub)
    args = parser.parse_args(argv)

    if args.command == "train":
        return _train.command(args)

    if args.command == "compile":
        try:
            return compile_command(args)
        except (ValueError, TypeError) as exc:
            print(f"tessera: error: {exc}", file=sys.stderr)
            return 2

    from .registry import blocks
    if args.command == "list":
        print("blocks: " + " ".join(blocks()))
        print("presets: " + " ".join(PRESET_NAMES))
        return 0
    if args.all:
        for preset in PRESET_NAMES:
            for name in blocks():
                path = args.output / preset / f"{name}.v"
                generate_one(name, preset, path, args.target)
                print(f"wrote {path}")
        return 0
    if not args.block:
        parser.error("--block is required unless --all is given")
    try:
        generate_one(args.block, args.config, args.output, args.target)
    except ValueError as exc:
        print(f"tessera: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output} and {args.output.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
