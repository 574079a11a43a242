"""cocotb + Verilator tier of the FP32 natural-log unit (sim/tb/fp32_func.py, shared with
div/sqrt/exp), preset default: all special cases (twice: back to back, then with
idle/backpressure), 100,000 random operands back to back, random idle/backpressure at four
rates, exact latency and one result per cycle, reset in mid-stream then a correct run."""
from sim.tb.runner import run_cocotb


def test_fp32_log_cocotb():
    run_cocotb("fp32_log", "default", "sim.tb.fp32_func", name="fp32_log_cocotb")
