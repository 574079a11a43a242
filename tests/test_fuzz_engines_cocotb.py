"""cocotb + Verilator tier of the engines' command-stream fuzzing (sim/tb/engines_fuzz.py):
more random raw commands than the fast tier (tests/test_fuzz_engines.py) on the generated
Verilog of the matmul engine and the optimizer engine (preset tiny)."""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("block", ["matmul_engine", "optim_engine"])
def test_engine_fuzz(block):
    run_cocotb(block, "tiny", "sim.tb.engines_fuzz", name=f"{block}_fuzz",
               testcase=f"{block}_random_commands",
               extra_env={"TB_FUZZ_SEED": "3", "TB_FUZZ_N": "500"})
