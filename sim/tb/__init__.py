"""Testbenches of both test tiers. cocotb + Verilator: one module per DUT (driver, monitor,
golden model, scoreboard), the stream driver/monitor (:mod:`sim.tb.cocotb_stream`) and the runner
(:mod:`sim.tb.runner`). Amaranth simulator: :mod:`sim.tb.amaranth_tb` and
:mod:`sim.tb.memport_tb`."""
