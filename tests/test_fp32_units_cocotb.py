"""cocotb + Verilator tier of the pipelined FP32 units (sim/tb/fp32_units.py).

Each unit is built once, at preset ``default`` (the full pipeline), and runs the special-value
pairs, 30,000 class-covering random operands at full rate (100,000 in ``make test-long``),
20,000 with idle/backpressure, a reset in mid-stream and the latency/throughput check in one
simulator process. ``bench_throughput`` is
not run here (``make bench-datapaths`` runs it with TESSERA_BENCH_OUT set).
"""
import pytest

from hdl.fp32.config import UNIT_NAMES
from sim.tb.runner import run_cocotb

TESTS = ["specials", "random_full_rate", "random_backpressure", "reset_mid_stream",
         "latency_throughput"]


@pytest.mark.parametrize("n_random", [30_000, pytest.param(100_000, marks=pytest.mark.long)])
@pytest.mark.parametrize("block", UNIT_NAMES)
def test_fp32_unit_cocotb(block, n_random):
    run_cocotb(block, "default", "sim.tb.fp32_units",
               name=f"fp32_units_cocotb_{block}_{n_random}", testcase=TESTS, seed=1,
               extra_env={"TESSERA_FP32_N": str(n_random)})
