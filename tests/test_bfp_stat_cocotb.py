"""cocotb + Verilator tier of QuantStat (sim/tb/bfp_stat.py) at preset "default" (group_size 16):
outputs and statistic bit-exact with sim.model.stats at every width, random idle/backpressure."""
from sim.tb.runner import run_cocotb


def test_bfp_stat_cocotb():
    run_cocotb("bfp_stat", "default", "sim.tb.bfp_stat", name="bfp_stat_cocotb_every_width",
               testcase="every_width")
