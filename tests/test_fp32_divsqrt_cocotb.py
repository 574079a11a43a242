"""cocotb + Verilator tier of the FP32 divide, square root and exp units (sim/tb/fp32_func.py).

One build per unit, preset ``default``. Each run: all special cases (every pair of the special
set for divide), 100,000 random vectors back to back, random idle/backpressure at four rates,
exact latency and one-result-per-cycle throughput, reset in mid-stream then a correct run.
``bench_throughput`` only runs from :func:`test_fp32_divsqrt_bench` when TESSERA_BENCH_OUT is set.
"""
import os

import pytest

from sim.tb.runner import run_cocotb

UNITS = ["fp32_div", "fp32_sqrt", "fp32_exp"]


@pytest.mark.parametrize("block", UNITS)
def test_fp32_divsqrt_cocotb(block):
    run_cocotb(block, "default", "sim.tb.fp32_func", name=f"fp32_divsqrt_cocotb_{block}")


@pytest.mark.skipif(not os.environ.get("TESSERA_BENCH_OUT"), reason="benchmark: set TESSERA_BENCH_OUT")
@pytest.mark.parametrize("block", UNITS)
def test_fp32_divsqrt_bench(block):
    run_cocotb(block, "default", "sim.tb.fp32_func", name=f"fp32_divsqrt_bench_{block}",
               testcase="bench_throughput",
               extra_env={"TESSERA_BENCH_OUT": os.environ["TESSERA_BENCH_OUT"]})
