"""cocotb + Verilator tier of the FP32 natural log on one shared multiplier
(:class:`hdl.fp32.log_serial.FP32LogSerial`, block ``fp32_log_serial``; sim/tb/fp32_func.py,
shared with div/sqrt/exp/log), preset default, bit-exact against the golden model of
``fp32_log`` (:class:`sim.model.fp32_log.FP32Log`: the serial unit computes the same words).

Covers all special cases (twice: back to back, then with idle/backpressure), 20,000 random
operands back to back (one accepted every ``ii`` = 7 cycles in steady state; 140,000 cycles),
random idle/backpressure at four rates, the exact published latency of a lone operation and the
exact cycle count, result spacing and operand spacing of a full stream implied by the published
``ii``, and reset in mid-stream then a correct run. Timing is checked against the block's
published ``latency`` and ``ii``, not numbers written in the test.
"""
from sim.tb.runner import run_cocotb


def test_fp32_log_serial_cocotb():
    run_cocotb("fp32_log_serial", "default", "sim.tb.fp32_func", name="fp32_log_serial_cocotb")
