"""cocotb testbench of :class:`hdl.bfp.stat.QuantStat` (BFP converter + FAST statistic) under
Verilator, preset from ``TESSERA_PRESET`` (``default``: group_size 16). Golden model:
:class:`sim.model.stats.QuantStatModel` (bit-exact: every output payload and the statistic after
every tensor)."""
from __future__ import annotations

import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from hdl.config import BFPConfig
from sim.model import bfp
from sim.model.stats import QuantStatModel, StatState
from sim.tb.cocotb_stream import StreamTB

PRESET = os.environ.get("TESSERA_PRESET", "default")
CFG = BFPConfig.preset(PRESET)


def block_params() -> dict:
    from hdl.bfp.stat import TESSERA_BLOCKS
    return TESSERA_BLOCKS[0].params(PRESET)


PARAMS = block_params()


def read_stat(dut) -> StatState:
    """The ``stat`` port, unpacked with the hardware's layout."""
    from hdl.bfp.stat import stat_layout
    return StatState.of(stat_layout(CFG).from_bits(dut.stat.value.to_unsigned()))


class TB(StreamTB):
    def __init__(self, dut, *, seed: int):
        super().__init__(dut, seed=seed, idle_prob=0.2, stall_prob=0.2)
        self.rng = np.random.default_rng(seed)
        self.model = QuantStatModel(CFG)

    async def start(self):
        self.dut.clear_flags.value = 0
        self.dut.stat_load.value = 0
        await super().start()

    async def clear(self):
        self.dut.stat_load.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.stat_load.value = 0
        self.model.clear()

    async def tensor(self, words, label) -> StatState:
        """Send one tensor, compare every output and then the statistic."""
        expected = [self.model.accept(w) for w in words]
        send = cocotb.start_soon(self.driver.send_all(words))
        got = await self.monitor.wait_for(len(words), timeout_cycles=50_000)
        await send
        bad = [k for k, (g, e) in enumerate(zip(got, expected)) if g != e]
        assert not bad, f"{label}: outputs {bad[:5]} differ from the model"
        await ClockCycles(self.dut.clk, PARAMS["stat_latency"])
        got_stat = read_stat(self.dut)
        assert got_stat == self.model.state, f"{label}: DUT {got_stat} != model {self.model.state}"
        return got_stat

    def words(self, n, widths, *, gaussian: bool):
        if gaussian:
            vals = self.rng.standard_normal((n, CFG.group_size)).astype(np.float32)
            vals *= np.float32(2.0) ** self.rng.integers(-8, 8, (n, 1)).astype(np.float32)
        else:
            vals = bfp.random_fp32_groups(self.rng, n, CFG.group_size, special_prob=0.02)
        return [bfp.pack_fp32_group(v, CFG, int(self.rng.choice(widths)),
                                    int(self.rng.choice(bfp.ROUNDING_MODES))) for v in vals]


@cocotb.test()
async def every_width(dut):
    """Per width (2, 4, 6, 8), all rounding modes: a wide-range tensor and a gaussian one,
    each after a ``stat_load``; then a tensor of mixed width codes 0..15."""
    tb = TB(dut, seed=21)
    await tb.start()
    for width in CFG.widths:
        for gaussian in (False, True):
            await tb.clear()
            s = await tb.tensor(tb.words(150, [width], gaussian=gaussian), (width, gaussian))
            assert (s == StatState()) == (width == CFG.max_mantissa)
    await tb.clear()
    await tb.tensor(tb.words(150, list(range(16)), gaussian=True), "mixed widths")
