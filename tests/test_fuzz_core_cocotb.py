"""cocotb + Verilator tier of the host-protocol fuzzing (sim/tb/core_fuzz.py): longer seeded
streams of raw host commands and malformed programs on the generated Verilog of the S = 4
core (preset tiny). ``make fuzz`` runs more seeds (``FUZZ_SEEDS``, ``FUZZ_N``)."""
import os

from sim.tb.runner import run_cocotb


def test_training_core_fuzz():
    run_cocotb("training_core", "tiny", "sim.tb.core_fuzz", name="training_core_fuzz",
               testcase="random_host_commands",
               extra_env={"TB_FUZZ_SEEDS": os.environ.get("FUZZ_SEEDS", "1,2"),
                          "TB_FUZZ_N": os.environ.get("FUZZ_N", "300"),
                          "TB_IDLE": "0.2", "TB_STALL": "0.2"})
