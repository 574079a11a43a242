"""``make bench-blocks``: measured cycles and throughput of the foundation blocks.

* fMAC cycles per product for every (m_a, m_b) at lanes 1, 2 and 4, measured on the DUT
  (blocks ``fmac``, ``fmac_lanes2``, ``fmac_lanes4``; the bench asserts they equal the model).
* BFP converter (FP32 -> BFP) throughput in groups and values per cycle, measured on the DUT.
* Verilator simulated cycles per second for each run (cocotb driving every cycle).

Writes ``docs/bench/blocks.json`` and ``docs/bench/blocks.md``.
"""
from __future__ import annotations

import platform
import sys

from sim.bench.common import run_bench, write_json, write_markdown

FMAC_BLOCKS = {1: "fmac", 2: "fmac_lanes2", 4: "fmac_lanes4"}
CONVERTERS = [("bfp_converter", "sim.tb.bfp_converter")]


def main() -> int:
    fmac = {}
    for lanes, block in FMAC_BLOCKS.items():
        res = run_bench(block, "default", "sim.tb.fmac", "bench_cycles")
        assert res["lanes"] == lanes, (block, res["lanes"])
        fmac[lanes] = res
    conv = {block: run_bench(block, "default", module, "bench_throughput")
            for block, module in CONVERTERS}

    data = {
        "machine": f"{platform.machine()} {platform.python_implementation()} "
                   f"{platform.python_version()}",
        "fmac_cycles": {str(l): r["cycles_per_product"] for l, r in fmac.items()},
        "fmac_model_cycles": {str(l): r["model_cycles_per_product"] for l, r in fmac.items()},
        "fmac_sim_cycles_per_s": {str(l): round(r["sim_cycles_per_s"]) for l, r in fmac.items()},
        "converters": conv,
    }
    write_json("blocks", data)

    pairs = list(fmac[1]["cycles_per_product"])
    lines = ["# Foundation blocks: measured", "",
             "Regenerate with `make bench-blocks`. Every number is measured on the Verilated DUT "
             "by a cocotb benchmark test that also asserts the results. Cycle counts are exact; "
             "simulated cycles/s is wall-clock and falls with machine load.", "",
             "## fMAC cycles per product (m_a x m_b)", "",
             "| lanes | " + " | ".join(pairs) + " |",
             "|---|" + "---|" * len(pairs)]
    for lanes, r in fmac.items():
        lines.append(f"| {lanes} | " + " | ".join(f"{r['cycles_per_product'][p]:g}" for p in pairs)
                     + " |")
    lines += ["", "## Converters", "",
              "| block | group size | groups per cycle | values per cycle | latency (cycles) "
              "| simulated cycles/s |",
              "|---|---|---|---|---|---|"]
    for block, r in conv.items():
        lines.append(f"| {block} | {r['group_size']} | {r['groups_per_cycle']:.3f} | "
                     f"{r['values_per_cycle']:.2f} | {r['latency']} | "
                     f"{r['sim_cycles_per_second']:,.0f} |")
    lines += ["", "## Verilator simulation speed (cocotb driving every cycle)", "",
              "| run | simulated cycles/s |", "|---|---|"]
    for lanes, r in fmac.items():
        lines.append(f"| fmac lanes={lanes} bench | {r['sim_cycles_per_s']:,.0f} |")
    for block, r in conv.items():
        lines.append(f"| {block} bench (one {r['group_size']}-value group driven every cycle) "
                     f"| {r['sim_cycles_per_second']:,.0f} |")
    write_markdown("blocks", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
