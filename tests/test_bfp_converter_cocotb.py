"""cocotb + Verilator tier of BFPConverter (sim/tb/bfp_converter.py) at preset "default"
(group_size 16): >= 10,240 random values per width x rounding mode, named edge cases,
latency/throughput, reset in mid-stream, sticky flags. ``bench_throughput`` is skipped unless
TESSERA_BENCH_OUT is set (make bench-blocks)."""
import pytest

from sim.tb.runner import run_cocotb

TESTS = ["random_every_width_and_mode", "edge_cases", "latency_and_full_throughput",
         "reset_mid_stream", "sticky_flags_set_and_clear"]


@pytest.mark.parametrize("testcase", TESTS)
def test_bfp_converter_cocotb(testcase):
    run_cocotb("bfp_converter", "default", "sim.tb.bfp_converter",
               name=f"bfp_converter_cocotb_{testcase}", testcase=testcase)
