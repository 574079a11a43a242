"""cocotb + Verilator tier of the engines' command-stream fuzzing (sim/tb/engines_fuzz.py):
more random raw commands than the fast tier (tests/test_fuzz_engines.py) on the generated
Verilog of the matmul engine and the optimizer engine (preset tiny)."""
import pytest

from sim.tb.runner import run_cocotb


#: random raw commands per engine: 250 in ``make test``, 1,000 (another seed) in ``make test-long``
COUNTS = [(3, 250), pytest.param(4, 1000, marks=pytest.mark.long)]


@pytest.mark.parametrize("seed, n", COUNTS)
@pytest.mark.parametrize("block", ["matmul_engine", "optim_engine"])
def test_engine_fuzz(block, seed, n):
    run_cocotb(block, "tiny", "sim.tb.engines_fuzz", name=f"{block}_fuzz_{n}",
               testcase=f"{block}_random_commands",
               extra_env={"TB_FUZZ_SEED": str(seed), "TB_FUZZ_N": str(n)})
