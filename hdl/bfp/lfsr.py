"""Noise source for stochastic rounding: one 32-bit Fibonacci LFSR per group lane.

Golden model: :class:`sim.model.bfp.LFSR` (bit-exact). See ``docs/bfp.md``.
"""
from __future__ import annotations

from functools import reduce
from operator import xor

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..config import BFPConfig
from ..lib.mustuse import check_config_type

__all__ = ["LFSR_WIDTH", "LFSR_TAPS", "lfsr_lane_seed", "BFPNoise"]

#: Characteristic polynomial x^32 + x^22 + x^2 + x + 1 (primitive): the new bit shifted in at
#: the top is the XOR of these state bits.
LFSR_WIDTH = 32
LFSR_TAPS = (0, 1, 2, 22)

_M32 = 0xFFFF_FFFF


def lfsr_lane_seed(seed: int, lane: int) -> int:
    """Reset state of lane ``lane``: MurmurHash3 ``fmix32(seed + (lane + 1) * 0x9E3779B9)``, 0 -> 1.

    Computed at elaboration time (it is only a reset value); :func:`sim.model.bfp.lfsr_lane_seed` is
    an independent copy that tests compare with this one.
    """
    z = (seed + (lane + 1) * 0x9E3779B9) & _M32
    z ^= z >> 16
    z = (z * 0x85EBCA6B) & _M32
    z ^= z >> 13
    z = (z * 0xC2B2AE35) & _M32
    z ^= z >> 16
    return z or 1


class BFPNoise(wiring.Component):
    """``group_size`` lanes of ``noise_bits``-bit uniform noise, advanced on request.

    Lane ``j`` is a 32-bit Fibonacci LFSR (state bit ``i`` is the ``i``-th next output bit; one
    step is ``state = (state >> 1) | (parity(state & taps) << 31)``) reset to
    ``lfsr_lane_seed(config.lfsr_seed, j)``. ``noise[j]`` is the low ``noise_bits`` bits of the
    state; a cycle with ``advance`` set steps every lane ``noise_bits`` times, so consecutive
    draws use disjoint stretches of the sequence. Latency: none (``noise`` is the current state).

    Parameters
    ----------
    config : BFPConfig
        ``group_size``, ``noise_bits`` (<= 16) and ``lfsr_seed`` are used.

    Members
    -------
    advance : In(1)
        Step every lane ``noise_bits`` times at the next clock edge.
    noise : Out(ArrayLayout(unsigned(noise_bits), group_size))
        The current noise values.
    """

    def __init__(self, *, config: BFPConfig):
        check_config_type(self, config, BFPConfig)
        self.config = config
        super().__init__({
            "advance": In(1),
            "noise": Out(data.ArrayLayout(unsigned(config.noise_bits), config.group_size)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        r = cfg.noise_bits
        for j in range(cfg.group_size):
            state = Signal(LFSR_WIDTH, init=lfsr_lane_seed(cfg.lfsr_seed, j),
                           name=f"lfsr_{j}_state")
            nxt = state
            for step in range(r):             # a signal per step keeps the netlist linear
                stepped = Signal(LFSR_WIDTH, name=f"lfsr_{j}_step_{step + 1}")
                m.d.comb += stepped.eq(Cat(nxt[1:], reduce(xor, [nxt[t] for t in LFSR_TAPS])))
                nxt = stepped
            m.d.comb += self.noise[j].eq(state[:r])
            with m.If(self.advance):
                m.d.sync += state.eq(nxt)
        return m
