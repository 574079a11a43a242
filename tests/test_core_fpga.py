"""The training core's FPGA build (docs/core.md "FPGA"): ``CoreConfig.fpga()`` and the
``training_core_fpga`` rows of ``make synth`` (no synthesis here: configs only)."""
import dataclasses

import pytest

from boards.synth import TARGETS, VARIANTS, build_block
from hdl.core.config import CoreConfig
from hdl.core.core import TrainingCore
from hdl.registry import blocks


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_fpga_config_is_the_preset_with_one_vector_lane(preset):
    cfg = CoreConfig.preset(preset)
    fpga = cfg.fpga()
    assert fpga == dataclasses.replace(cfg, vector_lanes=1)
    assert fpga.vec_lanes == 1 and fpga.size == cfg.size and fpga.lines == cfg.lines
    core = build_block("training_core_fpga", preset)
    core._MustUse__silence = True       # built only for its config (never elaborated)
    assert isinstance(core, TrainingCore) and core.config == fpga


def test_fpga_rows_are_synth_targets_and_not_registered_blocks():
    assert {("training_core_fpga", p) for p in ("tiny", "default")} <= set(TARGETS)
    assert not set(VARIANTS) & set(blocks())
