"""cocotb + Verilator tier of the whole training core: training steps of small MLPs run by the
generated Verilog, bit-exact against the golden model (every weight, optimizer-state word,
loss, counter, and at the end the whole scratchpad). S = 4 (preset tiny) and S = 8
(default). See sim/tb/core.py."""
import pytest

from sim.tb.runner import run_cocotb

# builds the training core (S = 4 and S = 8) in Verilator: minutes each under load
pytestmark = pytest.mark.timeout(3600)

# name: (preset, testcase, environment)
CASES = {
    "s4_adam_mixed_widths": ("tiny", "training_steps",
                             {"TB_OPT": "adam", "TB_PREC": "mixed", "TB_STEPS": "2"}),
    "s4_sgd_clip": ("tiny", "training_steps",
                    {"TB_OPT": "sgd", "TB_CLIP": "0.05", "TB_STEPS": "2"}),
    "s4_momentum_micro4": ("tiny", "training_steps",
                           {"TB_OPT": "momentum", "TB_MICRO": "4", "TB_STEPS": "2"}),
    "s4_adamw_stochastic_backpressure": ("tiny", "training_steps",
                                         {"TB_OPT": "adamw", "TB_PREC": "stochastic",
                                          "TB_IDLE": "0.3", "TB_STALL": "0.3"}),
    "s4_inf_skips_step": ("tiny", "inf_skips_step", {"TB_LOSS_SCALE": "8"}),
    "s4_one_pass_skip": ("tiny", "one_pass_skip_matches_two_pass", {}),
    "s4_checkpointing": ("tiny", "checkpointing_identical",
                         {"TB_LAYERS": "8,12,12,10"}),
    "s4_reset_mid_step": ("tiny", "reset_mid_step", {}),
    "s4_rejected_input": ("tiny", "rejected_input_changes_nothing", {}),
    "s4_fast_adapt": ("tiny", "fast_adapt_steps", {}),
    "s8_adam_micro2": ("default", "training_steps",
                       {"TB_OPT": "adam", "TB_MICRO": "2", "TB_LAYERS": "16,16,10",
                        "TB_BATCH": "16", "TB_PREC": "mixed"}),
    "s8_sgd_clip_loss_scale": ("default", "training_steps",
                               {"TB_OPT": "sgd", "TB_CLIP": "0.05", "TB_LOSS_SCALE": "4",
                                "TB_LAYERS": "16,16,10", "TB_BATCH": "16"}),
}


#: The S = 8 core's cases build a second, larger core (about 4.5 min of the suite's 2-core
#: machine, idle): they run in ``make test-long``. ``make test`` runs the S = 4 core and the S = 8
#: array, and ``make train`` checks the S = 8 core's steps against the golden
#: model (``--check-every``).
LONG = {"s8_adam_micro2", "s8_sgd_clip_loss_scale"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.long) if n in LONG else n
                                  for n in sorted(CASES)])
def test_training_core(name):
    preset, testcase, env = CASES[name]
    run_cocotb("training_core", preset, "sim.tb.core", name=f"training_core_{name}",
               testcase=testcase, extra_env=env)
