"""cocotb + Verilator tier of BFPToFP32 (sim/tb/bfp_to_fp32.py) at preset "default": exact
round trip of 640 converted groups per width x mode, arbitrary payloads (RNE, overflow, codes),
latency/throughput, reset in mid-stream."""
import pytest

from sim.tb.runner import run_cocotb

TESTS = ["round_trip_every_width_and_mode", "arbitrary_payloads", "latency_and_full_throughput",
         "reset_mid_stream"]


@pytest.mark.parametrize("testcase", TESTS)
def test_bfp_to_fp32_cocotb(testcase):
    run_cocotb("bfp_to_fp32", "default", "sim.tb.bfp_to_fp32",
               name=f"bfp_to_fp32_cocotb_{testcase}", testcase=testcase)
