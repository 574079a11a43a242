"""boards/paths.py: the path estimate on hand-built netlists (no yosys needed)."""
import pytest

from boards.paths import CELL_DELAY_NS, MULT_NS, NET_NS, longest_paths, over_budget

FF, LUT, CCU = CELL_DELAY_NS["TRELLIS_FF"], CELL_DELAY_NS["LUT4"], CELL_DELAY_NS["CCU2C"]


def _cell(kind, **ports):
    """A cell of ``kind``; ``ports`` maps port name to (direction, bit)."""
    return {"type": kind, "port_directions": {p: d for p, (d, _) in ports.items()},
            "connections": {p: [b] for p, (_, b) in ports.items()}}


def _ff(d, q, clk=1):
    return _cell("TRELLIS_FF", CLK=("input", clk), DI=("input", d), Q=("output", q))


def _lut(a, z, b="0"):
    return _cell("LUT4", A=("input", a), B=("input", b), Z=("output", z))


def _netlist(cells):
    return {"modules": {"top": {"cells": cells}}}


def test_a_chain_of_luts_between_two_registers():
    """q0 -> 3 LUTs -> d1: clock-to-out, 4 nets, 3 LUTs, setup."""
    cells = {"r0": _ff(d=2, q=10), "a_LUT4_Z": _lut(10, 11), "b_LUT4_Z": _lut(11, 12),
             "c_LUT4_Z": _lut(12, 13), "r1": _ff(d=13, q=14)}
    (path,) = longest_paths(_netlist(cells), count=5)
    assert path["delay_ns"] == pytest.approx(FF["clk"] + 4 * NET_NS + 3 * LUT["comb"]
                                             + FF["setup"], abs=0.01)
    assert path["levels"] == 3
    assert [c for c, _, _ in path["cells"]] == ["r0", "a_LUT4_Z", "b_LUT4_Z", "c_LUT4_Z"]
    assert path["end"] == "r1.DI"


def test_the_longer_of_two_paths_comes_first_and_carry_chains_are_dedicated():
    """Into r2: one LUT from r0, or r1 through two carry cells (COUT -> CIN has no net delay).
    The carry path is longer (0.45 + 0.06 + net) than the single LUT (0.45)."""
    cells = {
        "r0": _ff(d=2, q=10), "r1": _ff(d=2, q=20),
        "x_LUT4_Z": _lut(10, 11),
        "c0_CCU2C_S0": _cell("CCU2C", A0=("input", 20), COUT=("output", 21),
                             S0=("output", 22)),
        "c1_CCU2C_S0": _cell("CCU2C", CIN=("input", 21), S0=("output", 23)),
        "r2": _ff(d=11, q=30), "r3": _ff(d=23, q=31),
    }
    paths = longest_paths(_netlist(cells), count=5)
    assert [p["end"] for p in paths] == ["r3.DI", "r2.DI"]
    assert paths[0]["delay_ns"] == pytest.approx(
        FF["clk"] + NET_NS + CCU["comb"] + CCU["carry"] + NET_NS + FF["setup"], abs=0.01)
    assert paths[1]["delay_ns"] == pytest.approx(
        FF["clk"] + 2 * NET_NS + LUT["comb"] + FF["setup"], abs=0.01)


def test_one_path_per_family_and_count():
    """Eight bits of one register into eight bits of another are one family."""
    cells = {}
    for i in range(8):
        cells[f"src_TRELLIS_FF_Q_{i}"] = _ff(d=2, q=100 + i)
        cells[f"sum_LUT4_Z_{i}"] = _lut(100 + i, 200 + i)
        cells[f"dst_TRELLIS_FF_Q_{i}"] = _ff(d=200 + i, q=300 + i)
    cells["other_TRELLIS_FF_Q"] = _ff(d=2, q=400)
    cells["thing_TRELLIS_FF_Q"] = _ff(d=400, q=401)
    paths = longest_paths(_netlist(cells), count=5)
    assert len(paths) == 2
    assert longest_paths(_netlist(cells), count=1)[0]["levels"] == 1


def test_a_slices_wide_function_muxes_take_no_routing():
    """LUT4 -> PFUMX (ALUT/BLUT) -> L6MUX21 (D0/D1) are connections inside a slice: no net
    delay on them; a PFUMX's select (C0) comes through the routing."""
    mux, l6 = CELL_DELAY_NS["PFUMX"], CELL_DELAY_NS["L6MUX21"]
    cells = {"r0": _ff(d=2, q=10), "a_LUT4_Z": _lut(10, 11),
             "f5_PFUMX_Z": _cell("PFUMX", ALUT=("input", 11), BLUT=("input", 11),
                                 C0=("input", 2), Z=("output", 12)),
             "f6_L6MUX21_Z": _cell("L6MUX21", D0=("input", 12), D1=("input", 12),
                                   SD=("input", 2), Z=("output", 13)),
             "r1": _ff(d=13, q=14)}
    (path,) = longest_paths(_netlist(cells), count=5)
    assert path["delay_ns"] == pytest.approx(
        FF["clk"] + NET_NS + LUT["comb"] + mux["comb"] + l6["comb"] + NET_NS + FF["setup"],
        abs=0.01)
    # the select through the routing: r0 -> PFUMX.C0 is a net
    cells["f5_PFUMX_Z"]["connections"]["C0"] = [10]
    cells["a_LUT4_Z"]["connections"]["A"] = [2]
    (path,) = longest_paths(_netlist(cells), count=5)
    assert path["delay_ns"] == pytest.approx(
        FF["clk"] + NET_NS + mux["comb"] + l6["comb"] + NET_NS + FF["setup"], abs=0.01)


def _mult(a, p, **regs):
    """A MULT18X18D from bit ``a`` to bit ``p``; ``regs``: REG_<name>_CLK parameters."""
    c = _cell("MULT18X18D", A0=("input", a), CLK0=("input", 1), P0=("output", p))
    c["parameters"] = {f"REG_{k}_CLK": v for k, v in regs.items()}
    return c


def test_a_multiplier_is_combinational_only_without_registers():
    """A MULT18X18D with no register (the parameters absent or NONE) lies on the path; with
    input and output registers (RegisteredMul) it ends one path at its operands and starts
    the next at its product: clock to P, not the multiply, in front of the next LUT."""
    mul = CELL_DELAY_NS["MULT18X18D"]
    for regs in ({}, {"INPUTA": "NONE", "INPUTB": "NONE", "PIPELINE": "NONE",
                      "OUTPUT": "NONE"}):
        cells = {"r0": _ff(d=2, q=10), "m_MULT18X18D_P0": _mult(10, 11, **regs),
                 "x_LUT4_Z": _lut(11, 12), "r1": _ff(d=12, q=13)}
        (path,) = longest_paths(_netlist(cells), count=5)
        assert path["delay_ns"] == pytest.approx(
            FF["clk"] + 3 * NET_NS + mul["comb"] + LUT["comb"] + FF["setup"], abs=0.01)
    cells = {"r0": _ff(d=2, q=10), "w_LUT4_Z": _lut(10, 20),
             "m_MULT18X18D_P0": _mult(20, 11, INPUTA="CLK0", INPUTB="CLK0", OUTPUT="CLK0"),
             "x_LUT4_Z": _lut(11, 12), "r1": _ff(d=12, q=13)}
    paths = longest_paths(_netlist(cells), count=5)
    by_end = {p["end"]: p["delay_ns"] for p in paths}
    assert by_end["r1.DI"] == pytest.approx(
        MULT_NS["clk_out"] + 2 * NET_NS + LUT["comb"] + FF["setup"], abs=0.01)
    assert by_end["m_MULT18X18D_P0.A0"] == pytest.approx(
        FF["clk"] + 2 * NET_NS + LUT["comb"] + MULT_NS["setup_in"], abs=0.01)
    # an output register alone: the multiply is in front of it (its operands' setup)
    cells["m_MULT18X18D_P0"] = _mult(20, 11, OUTPUT="CLK0")
    by_end = {p["end"]: p["delay_ns"] for p in longest_paths(_netlist(cells), count=5)}
    assert by_end["m_MULT18X18D_P0.A0"] == pytest.approx(
        FF["clk"] + 2 * NET_NS + LUT["comb"] + MULT_NS["setup_out"], abs=0.01)


def test_block_ram_read_data_by_its_output_register():
    """A DP16KD's read data starts 5.6 ns after the clock without its output register
    (REGMODE NOREG, the default) and 0.95 ns with it (OUTREG), per read port (A: DOA, B:
    DOB); an unread port's mode does not count."""
    def bram(out_bit, side, **modes):
        c = _cell("DP16KD", CLKB=("input", 1), ADB0=("input", 2),
                  **{f"DO{side}0": ("output", out_bit)}, DOA1=("output", 99))
        c["parameters"] = {f"REGMODE_{k}": v for k, v in modes.items()}
        return c
    ram = CELL_DELAY_NS["DP16KD"]
    for modes, side, clk in (({}, "B", ram["clk"]), ({"B": "OUTREG"}, "B", ram["clk_outreg"]),
                             ({"A": "NOREG", "B": "OUTREG"}, "B", ram["clk_outreg"]),
                             ({"A": "OUTREG"}, "B", ram["clk"])):
        cells = {"m_DP16KD": bram(10, side, **modes), "x_LUT4_Z": _lut(10, 11),
                 "r1": _ff(d=11, q=12)}
        (path,) = [p for p in longest_paths(_netlist(cells), count=5) if p["end"] == "r1.DI"]
        assert path["delay_ns"] == pytest.approx(
            clk + 2 * NET_NS + LUT["comb"] + FF["setup"], abs=0.01), modes
    assert ram["clk"] > 5 > 1 > ram["clk_outreg"]


def test_into_gives_the_longest_path_into_each_matching_end_signal():
    """``into``: only the matching end points, one path per end signal (its bits are one),
    however short beside the design's longest."""
    cells = {"r0": _ff(d=2, q=10), "a_LUT4_Z": _lut(10, 11), "b_LUT4_Z": _lut(11, 12),
             "slow_TRELLIS_FF_Q": _ff(d=12, q=13),
             "late_TRELLIS_FF_Q_0": _ff(d=10, q=20), "late_TRELLIS_FF_Q_1": _ff(d=11, q=21),
             "other_TRELLIS_FF_Q": _ff(d=11, q=22)}
    (path,) = longest_paths(_netlist(cells), count=5, into=r"^late_")
    assert path["end"] == "late_TRELLIS_FF_Q_1.DI"          # the slower bit, through a LUT
    assert [c for c, _, _ in path["cells"]] == ["r0", "a_LUT4_Z"]
    assert [p["end"] for p in longest_paths(_netlist(cells), count=5, into="other|slow")] \
        == ["slow_TRELLIS_FF_Q.DI", "other_TRELLIS_FF_Q.DI"]
    assert longest_paths(_netlist(cells), count=5, into="nothing") == []
    with pytest.raises(ValueError, match="into must be a regular expression"):
        longest_paths(_netlist(cells), into="(")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="count"):
        longest_paths(_netlist({}), count=0)
    with pytest.raises(ValueError, match="top module 'nope'"):
        longest_paths(_netlist({}), top="nope")


def test_over_budget_counts_late_end_points_and_their_slack():
    """Two end points: r1 three LUTs after r0 (4 nets), r2 one LUT after it (2 nets). With the
    period between their arrivals only r1 is late, by its arrival minus the period; with a
    period under both, both are; the count is by top-level instance."""
    cells = {"r0": _ff(d=2, q=10), "a_LUT4_Z": _lut(10, 11), "b_LUT4_Z": _lut(11, 12),
             "c_LUT4_Z": _lut(12, 13), "blk.r1": _ff(d=13, q=14), "r2": _ff(d=11, q=15)}
    long_ = FF["clk"] + 4 * NET_NS + 3 * LUT["comb"] + FF["setup"]
    short = FF["clk"] + 2 * NET_NS + LUT["comb"] + FF["setup"]
    mid = (long_ + short) / 2
    r = over_budget(_netlist(cells), period_ns=mid)
    assert r["failing"] == 1 and r["tns_ns"] == pytest.approx(long_ - mid, abs=0.1)
    assert r["by_block"] == {"blk": 1}
    # r0 and r2 are end points too; r0's D is an undriven constant, so not counted
    assert r["endpoints"] == 2
    r = over_budget(_netlist(cells), period_ns=short - 0.5)
    assert r["failing"] == 2 and r["by_block"] == {"blk": 1, "top": 1}
    assert over_budget(_netlist(cells), period_ns=long_ + 0.1)["failing"] == 0
    for bad in (0, -1.0, True, "10"):
        with pytest.raises(ValueError, match="period_ns"):
            over_budget(_netlist(cells), period_ns=bad)


def test_routed_end_points_from_nextpnr_detailed_report():
    """routed_over_budget counts the end points (cell, port) whose routed arrival (the
    ``[min, max]`` pair's max, the worst over the nets reaching it) passes the period."""
    from boards.paths import routed_over_budget
    report = {"detailed_net_timings": [
        {"net": "a", "driver": "block.x.r_TRELLIS_FF_Q", "port": "Q", "endpoints": [
            {"cell": "block.x.s_TRELLIS_FF_Q_3", "port": "DI", "delay": [1.0, 12.5]},
            {"cell": "block.y.t_TRELLIS_FF_Q", "port": "CE", "delay": [0.5, 9.0]}]},
        {"net": "b", "driver": "block.x.q_LUT4_Z", "port": "F", "endpoints": [
            {"cell": "block.y.t_TRELLIS_FF_Q", "port": "CE", "delay": [0.5, 10.5]},
            {"cell": "block.x.s_TRELLIS_FF_Q_12", "port": "DI", "delay": [2.0, 11.0]},
            {"cell": "fold_3_0_TRELLIS_FF_Q", "port": "M", "delay": [2.0, 10.25]},
            {"cell": "block.own_TRELLIS_FF_Q_1", "port": "M", "delay": [2.0, 10.05]}]}]}
    got = routed_over_budget(report)
    assert (got["endpoints"], got["failing"], got["slowest_ns"]) == (5, 5, 12.5)
    assert got["tns_ns"] == round(2.5 + 0.5 + 1.0 + 0.25 + 0.05, 1)
    assert got["by_block"] == {"x": 2, "harness": 1, "top": 1, "y": 1}
    assert got["groups"][0] == ["block.x.s", 2, 12.5]
    assert routed_over_budget(report, 12.0)["failing"] == 1
    with pytest.raises(ValueError, match="period_ns"):
        routed_over_budget(report, 0)
    with pytest.raises(ValueError, match="detailed-timing-report"):
        routed_over_budget({"fmax": {}})
