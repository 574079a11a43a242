"""cocotb + Verilator tier of the matmul engine: preset tiny (S = 4) for every test, preset
default (S = 8) for one random sweep and back-to-back passes (``make test-long``). See
sim/tb/matmul_engine.py."""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("testcase", ["named_shapes_every_mode", "random_passes",
                                      "back_to_back_passes", "every_width_pair",
                                      "bwd_data_uses_fwd_weight_image",
                                      "pass_cycles_documented",
                                      "reset_mid_operation", "invalid_commands"])
def test_matmul_engine_tiny(testcase):
    run_cocotb("matmul_engine", "tiny", "sim.tb.matmul_engine",
               name=f"matmul_engine_tiny_{testcase}", testcase=testcase)


# The S = 8 engine (a second build of about 2 min): ``make test-long``. ``make test`` runs the
# engine at S = 4 (every case above) and the S = 8 array in tests/test_array_cocotb.py.
@pytest.mark.long
def test_matmul_engine_default_s8():
    run_cocotb("matmul_engine", "default", "sim.tb.matmul_engine",
               name="matmul_engine_default_random", testcase="random_passes",
               extra_env={"TB_PASSES": "6", "TB_SEED": "9"})


@pytest.mark.long
def test_matmul_engine_default_s8_back_to_back():
    run_cocotb("matmul_engine", "default", "sim.tb.matmul_engine",
               name="matmul_engine_default_back_to_back", testcase="back_to_back_passes",
               extra_env={"TB_RUNS": "3", "TB_SEED": "10"})
