"""cocotb + Verilator tier of the pipelined FP32 units (sim/tb/fp32_units.py).

Each unit is built once, at preset ``default`` (the full pipeline), and runs the special-value
pairs, 100,000 random operands at full rate, 20,000 with idle/backpressure, a reset in
mid-stream and the latency/throughput check in one simulator process. ``bench_throughput`` is
not run here (``make bench-datapaths`` runs it with TESSERA_BENCH_OUT set).
"""
import pytest

from hdl.fp32.config import UNIT_NAMES
from sim.tb.runner import run_cocotb

TESTS = ["specials", "random_full_rate", "random_backpressure", "reset_mid_stream",
         "latency_throughput"]


@pytest.mark.parametrize("block", UNIT_NAMES)
def test_fp32_unit_cocotb(block):
    run_cocotb(block, "default", "sim.tb.fp32_units", name=f"fp32_units_cocotb_{block}",
               testcase=TESTS, seed=1)
