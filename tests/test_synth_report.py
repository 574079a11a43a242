"""boards.synth's bookkeeping without running yosys: a target whose synthesis stops is recorded
as a row saying why (the other targets still run, ``make synth`` exits non-zero), and the
reason is the last ``ERROR:`` line of its yosys log; so is a place-and-route build whose yosys
stops."""
import importlib.util
import json
import subprocess

import pytest

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from boards import synth


def _fake_synthesis(tmp_path, monkeypatch):
    """boards.synth writing under ``tmp_path``, every target's synthesis a small fixed row."""
    monkeypatch.setattr(synth, "ROOT", tmp_path)
    monkeypatch.setattr(synth, "WORK", tmp_path / "build" / "synth")
    monkeypatch.setattr(synth, "_tool_versions", lambda: "test")
    monkeypatch.setattr(synth, "synth_resources", lambda block, preset, work: {
        "LUT4": 10, "CARRY (CCU2C)": 1, "FF": 5, "DSP (MULT18X18D)": 0, "BRAM (DP16KD)": 0,
        "LUTRAM (TRELLIS_DPR16X4)": 0, "cells": 16, "synth_seconds": 0.1})


def test_a_yosys_failure_is_a_row_and_the_run_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "ROOT", tmp_path)
    monkeypatch.setattr(synth, "WORK", tmp_path / "build" / "synth")
    monkeypatch.setattr(synth, "_tool_versions", lambda: "test")

    def fake_resources(block, preset, work):
        work.mkdir(parents=True, exist_ok=True)
        if block == "bad":
            (work / "yosys.log").write_text("...\nERROR: first\nmore\nERROR: Assert `wire' "
                                            "failed in abc_ops_reintegrate.cc:513.\n")
            raise synth.SynthFailed(synth._yosys_error(work / "yosys.log", 1))
        return {"LUT4": 10, "CARRY (CCU2C)": 1, "FF": 5, "DSP (MULT18X18D)": 0,
                "BRAM (DP16KD)": 0, "LUTRAM (TRELLIS_DPR16X4)": 0, "cells": 16,
                "synth_seconds": 0.1}

    monkeypatch.setattr(synth, "synth_resources", fake_resources)
    assert synth.main(["--only", "bad:tiny,good:tiny", "--no-pnr"]) == 1
    bad = json.loads((tmp_path / "build/synth/bad-tiny/result.json").read_text())
    assert bad["synth_error"] == ("yosys stopped: `Assert `wire' failed in "
                                  "abc_ops_reintegrate.cc:513.`")
    good = json.loads((tmp_path / "build/synth/good-tiny/result.json").read_text())
    assert good["logic_cells"] == 12 and "synth_error" not in good
    md = (tmp_path / "docs/bench/synth.md").read_text()
    assert "| bad | tiny | n/a | n/a |" in md and "| good | tiny | 10 | 1 |" in md
    assert "bad tiny: no resources: yosys stopped: `Assert" in md
    assert synth._yosys_error(tmp_path / "missing.log", 3) == "yosys exit status 3"


def test_router_seed_and_nextpnr_options_reach_place_and_route(tmp_path, monkeypatch):
    """``--router``, ``--seed`` and ``--pnr-opts`` are handed to place and route and recorded
    in the row (what ran is part of the result)."""
    _fake_synthesis(tmp_path, monkeypatch)
    seen = {}

    def fake_pnr(block, preset, work, seed=None, router="router1", opts="",
                 target_mhz=synth.TARGET_MHZ):
        seen.update(seed=seed, router=router, opts=opts, target_mhz=target_mhz)
        work.mkdir(parents=True, exist_ok=True)
        return {"fmax_mhz": 50.0, "target_mhz": target_mhz, "pnr_comb": 12, "pnr_ff": 5,
                "pnr_dsp": 0,
                "pnr_bram": 0, "pnr_router": router, "pnr_seed": seed, "pnr_opts": opts}

    monkeypatch.setattr(synth, "place_and_route", fake_pnr)
    assert synth.main(["--only", "good:tiny", "--router", "router2", "--seed", "3",
                       "--pnr-opts", "--placer-heap-beta 0.7"]) == 0
    assert seen == {"seed": 3, "router": "router2", "opts": "--placer-heap-beta 0.7",
                    "target_mhz": synth.TARGET_MHZ}
    row = json.loads((tmp_path / "build/synth/good-tiny/result.json").read_text())
    assert row["pnr_opts"] == "--placer-heap-beta 0.7" and row["fmax_mhz"] == 50.0
    # without --pnr-opts a target gets its PNR_OPTS entry (the core's FPGA build: the static
    # placer), others none
    monkeypatch.setitem(synth.PNR_OPTS, ("good", "tiny"), "--placer static")
    assert synth.main(["--only", "good:tiny,other:tiny"]) == 0
    assert seen["opts"] == ""                        # the last one run: other:tiny
    row = json.loads((tmp_path / "build/synth/good-tiny/result.json").read_text())
    assert row["pnr_opts"] == "--placer static" and row["pnr_router"] == "router1"
    assert synth.PNR_OPTS[("training_core_fpga", "tiny")] == "--placer static"
    # --target-mhz reaches place and route, is recorded, and the report names the constraint
    assert synth.main(["--only", "good:tiny", "--target-mhz", "55"]) == 0
    assert seen["target_mhz"] == 55.0
    row = json.loads((tmp_path / "build/synth/good-tiny/result.json").read_text())
    assert row["target_mhz"] == 55.0
    synth.write_reports([row])
    md = (tmp_path / "docs/bench/synth.md").read_text()
    assert "with a 55 MHz constraint (--target-mhz), not 125" in md
    for bad in ("0", "-5", "nan"):
        with pytest.raises(SystemExit):
            synth.main(["--only", "good:tiny", "--target-mhz", bad])


def test_seeds_place_and_route_once_per_seed_and_the_row_is_the_median(tmp_path, monkeypatch):
    """``--seeds``: one place and route per seed, each seed's log kept; the row is the median
    run's with the lowest and highest Fmax and every seed's figures, and the report shows the
    spread. Bad seed lists and ``--seed`` beside ``--seeds`` are refused."""
    _fake_synthesis(tmp_path, monkeypatch)
    fmax = {1: 80.0, 2: 90.0, 3: 85.0}
    seen = []

    def fake_pnr(block, preset, work, seed=None, router="router1", opts="",
                 target_mhz=synth.TARGET_MHZ):
        seen.append(seed)
        (work / "pnr").mkdir(parents=True, exist_ok=True)
        (work / "pnr" / "top.tim").write_text(f"seed {seed}\n")
        return {"fmax_mhz": fmax[seed], "target_mhz": target_mhz, "pnr_comb": 12,
                "pnr_ff": 5, "pnr_dsp": 0, "pnr_bram": 0, "pnr_seed": seed,
                "routed_over_budget": {"failing": seed, "tns_ns": 0.5 * seed, "groups": []}}

    monkeypatch.setattr(synth, "place_and_route", fake_pnr)
    assert synth.main(["--only", "good:tiny", "--seeds", "1,2,3"]) == 0
    assert seen == [1, 2, 3]
    work = tmp_path / "build/synth/good-tiny"
    assert [(work / f"pnr/seed{k}.tim").read_text() for k in (1, 2, 3)] == \
        ["seed 1\n", "seed 2\n", "seed 3\n"]
    row = json.loads((work / "result.json").read_text())
    assert (row["fmax_mhz"], row["pnr_seed"], row["fmax_min_mhz"], row["fmax_max_mhz"]) == \
        (85.0, 3, 80.0, 90.0)
    assert row["routed_over_budget"]["failing"] == 3           # the median run's end points
    assert row["pnr_seeds"] == [{"seed": k, "fmax_mhz": fmax[k], "failing": k,
                                 "tns_ns": 0.5 * k} for k in (1, 2, 3)]
    md = (tmp_path / "docs/bench/synth.md").read_text()
    assert "| 85.0 [80.0-90.0, 3 seeds] |" in md
    # an even count: the lower middle; a seed that did not route sorts lowest, no minimum
    fmax = {1: 80.0, 2: None, 3: 85.0, 4: 90.0}
    assert synth.main(["--only", "good:tiny", "--seeds", "1,2,3,4"]) == 0
    row = json.loads((work / "result.json").read_text())
    assert (row["fmax_mhz"], row["fmax_min_mhz"], row["fmax_max_mhz"]) == (80.0, None, 90.0)
    for bad in (["--seeds", "1"], ["--seeds", "1,1"], ["--seeds", "1,x"],
                ["--seeds", "-1,2"], ["--seeds", "1,2", "--seed", "3"]):
        with pytest.raises(SystemExit):
            synth.main(["--only", "good:tiny", *bad])
    with pytest.raises(ValueError, match="two or more runs"):
        synth.seed_summary([{"fmax_mhz": 1.0}])


class _Tiny(wiring.Component):
    a: In(4)
    y: Out(4)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.y.eq(self.a + 1)
        return m


def test_a_pnr_build_whose_yosys_stops_is_a_row(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "build_block", lambda block, preset: _Tiny())

    class FakePlatform:
        device, speed, package = synth.DEVICE, "6", "BG381"

        def build(self, harness, *, build_dir, **kw):
            for elaboratable in (harness, harness.block):    # nothing elaborates them here
                elaboratable._MustUse__silence = True
            (tmp_path / "pnr").mkdir(exist_ok=True)
            (tmp_path / "pnr" / "top.rpt").write_text(
                "...\nERROR: Assert `GetSize(conn.first) == GetSize(conn.second)' failed\n")
            raise subprocess.CalledProcessError(1, ["sh", "build_top.sh"])

    monkeypatch.setattr(synth, "pnr_platform", lambda target_mhz: FakePlatform())
    row = synth.place_and_route("x", "tiny", tmp_path)
    assert row["fmax_mhz"] is None
    assert row["pnr_error"] == ("yosys stopped in the place-and-route build: `Assert "
                                "`GetSize(conn.first) == GetSize(conn.second)' failed`")


def test_a_run_merges_only_the_targets_it_measured(tmp_path, monkeypatch):
    """A result left in build/synth by an earlier run does not replace the committed report's
    row of a target this run did not measure; ``--report-only`` merges every stored result."""
    monkeypatch.setattr(synth, "ROOT", tmp_path)
    monkeypatch.setattr(synth, "WORK", tmp_path / "build" / "synth")
    monkeypatch.setattr(synth, "_tool_versions", lambda: "test")

    def fake_resources(block, preset, work):
        work.mkdir(parents=True, exist_ok=True)
        return {"LUT4": 10, "CARRY (CCU2C)": 1, "FF": 5, "DSP (MULT18X18D)": 0,
                "BRAM (DP16KD)": 0, "LUTRAM (TRELLIS_DPR16X4)": 0, "cells": 16,
                "synth_seconds": 0.1}

    monkeypatch.setattr(synth, "synth_resources", fake_resources)
    committed = {"block": "old", "preset": "tiny", "LUT4": 1, "fmax_mhz": 70.0}
    synth.write_reports([committed])
    stale = tmp_path / "build/synth/old-tiny"
    stale.mkdir(parents=True)
    (stale / "result.json").write_text(json.dumps({**committed, "LUT4": 2, "fmax_mhz": 40.0}))

    def rows():
        report = json.loads((tmp_path / "docs/bench/synth.json").read_text())
        return {(r["block"], r["preset"]): r for r in report["results"]}

    assert synth.main(["--only", "new:tiny", "--no-pnr"]) == 0
    assert rows()[("old", "tiny")]["fmax_mhz"] == 70.0      # the committed row, kept
    assert rows()[("new", "tiny")]["LUT4"] == 10             # the measured row, added
    assert synth.main(["--report-only"]) == 0
    assert rows()[("old", "tiny")]["fmax_mhz"] == 40.0      # every stored result merged


def test_plain_names_flattens_bracketed_escaped_names_only():
    src = ("module top(\\a[0] , b);\n  wire [3:0] \\a ;\n  wire \\a[0] ;\n"
           "  wire \\blk.x[2].mag ;\n  wire \\blk.y ;\n  assign \\a[0]  = b[1];\nendmodule\n")
    out = synth.plain_names(src)
    assert out == ("module top(\\a_0_ , b);\n  wire [3:0] \\a ;\n  wire \\a_0_ ;\n"
                   "  wire \\blk.x_2_.mag ;\n  wire \\blk.y ;\n  assign \\a_0_  = b[1];\n"
                   "endmodule\n")
    assert synth.plain_names(out) == out


@pytest.mark.parametrize("taken", ["  wire a_0_ ;\n", "  wire \\a_0_ ;\n"])
def test_plain_names_refuses_a_clash(taken):
    src = "module top;\n  wire \\a[0] ;\n" + taken + "endmodule\n"
    with pytest.raises(ValueError, match="a_0_"):
        synth.plain_names(src)


# The P&R platform derives from amaranth-boards' ULX3S, installed by `make setup-fpga` (the
# `fpga` extra), not by `make setup`; `make synth` runs this file first.
@pytest.mark.skipif(importlib.util.find_spec("amaranth_boards") is None,
                    reason="make setup-fpga installs amaranth-boards")
def test_place_and_route_build_reads_plain_names():
    platform = synth.pnr_platform()
    assert "platform.plain_names(emit_verilog())" in platform.file_templates["{{name}}.v"]
    assert platform.plain_names("wire \\x[1] ;\n") == "wire \\x_1_ ;\n"


def test_fpga_optim_row_is_the_cores_engine():
    """The ``optim_engine_fpga`` row builds the optimizer engine with the FPGA core's configs
    (:func:`hdl.core.config.fpga_core_kwargs`: ``ii``, the FP32 units' and the divide /
    square-root units'), so its Fmax is the engine the core contains, not the default units'."""
    from boards.synth import VARIANTS
    from hdl.core.config import fpga_core_kwargs
    eng = VARIANTS["optim_engine_fpga"]("default")
    eng._MustUse__silence = True          # built only for its configs (never elaborated)
    kw = fpga_core_kwargs()
    assert eng.config.ii == kw["optim_config"].ii
    assert eng.fp32_config == kw["fp32_config"]
    assert eng.divsqrt_config == kw["divsqrt_config"]


@pytest.mark.parametrize("preset, size", [("tiny", 4), ("default", 8)])
def test_fpga_matmul_row_is_the_cores_engine(preset, size):
    """The ``matmul_engine_fpga`` rows build the matmul engine with the FPGA core's array
    config (``CoreConfig.fpga().array``: role ports, the request and command registers, one
    converter for both operand paths (no output skid), the results as magnitude and sign, two
    accumulator lanes, the scratchpad's read latency 3)."""
    from boards.synth import TARGETS, VARIANTS
    from hdl.core.config import CoreConfig
    assert ("matmul_engine_fpga", preset) in TARGETS
    eng = VARIANTS["matmul_engine_fpga"](preset)
    eng._MustUse__silence = True          # built only for its config (never elaborated)
    cfg = CoreConfig.preset(preset).fpga()
    assert eng.config == cfg.array
    a = eng.config
    assert (a.size, a.role_ports, a.req_reg, a.cmd_reg, a.shared_converter, a.out_skid,
            a.out_magnitude, a.acc_lanes, a.mem_latency) == (size, True, True, True, True, False,
                                                             True, 2, 3)
