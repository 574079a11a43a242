"""FAST block floating point -> FP32 converter (the inverse of :class:`BFPConverter`).

Golden model: :func:`sim.bfp.dequantize` / :class:`sim.bfp.BFPToFP32Model`. See ``docs/bfp.md``.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import BFPConfig
from ..formats import BFPFlags, fp32_group_layout
from ..fp32.round import round_to_fp32
from ..registry import Block
from .converter import bfp_stream_layout, decode_width, layout_fields, width_shape

__all__ = ["fp32_out_layout", "BFPToFP32"]


def fp32_out_layout(config: BFPConfig) -> data.StructLayout:
    """Output payload of :class:`BFPToFP32`, LSB first: ``data`` (``group_size`` FP32 words,
    element 0 in the low bits) | ``flags`` (the group's ``invalid`` | ``overflow``, passed on)."""
    return data.StructLayout({"data": fp32_group_layout(config), "flags": BFPFlags})


class BFPToFP32(wiring.Component):
    """Stream converter BFP -> FP32, one group per cycle.

    Element ``j`` becomes the binary32 nearest to ``(-1)**sign * M * 2**(E - (m - 1))`` with
    ``E`` the group exponent and ``m`` the payload's width (decoded like the converter's).
    Every group :class:`BFPConverter` produces is exactly representable, so the round trip
    FP32 -> BFP -> FP32 is exact on its outputs; other inputs round to nearest even below the
    normal range (exact subnormals) and overflow to ±Inf (only possible for ``E >= 128``, which
    the converter never emits). ``M = 0`` gives a zero with the element's sign. The group's
    ``flags`` travel on unchanged; a NaN/Inf group (all ``M = 0``) comes out as zeros.

    Pipeline: one stage (the shared :func:`hdl.fp32.round.round_to_fp32` logic, registered),
    ``latency = 1``; one group per cycle without backpressure.

    Parameters
    ----------
    config : BFPConfig
        ``group_size``, ``max_mantissa``, ``exp_bits`` are used.

    Members
    -------
    i : In(stream.Signature(bfp_stream_layout(config)))
        BFP groups (as the converter produces them).
    o : Out(stream.Signature(fp32_out_layout(config)))
        FP32 groups and the group flags.
    """

    latency = 1

    def __init__(self, *, config: BFPConfig):
        if not isinstance(config, BFPConfig):
            raise TypeError(f"BFPToFP32.config must be a BFPConfig, not {config!r}")
        self.config = config
        super().__init__({
            "i": In(stream.Signature(bfp_stream_layout(config))),
            "o": Out(stream.Signature(fp32_out_layout(config))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        inp = self.i.payload
        load = Signal()
        m.d.comb += [
            load.eq(~self.o.valid | self.o.ready),
            self.i.ready.eq(load),
        ]
        width = decode_width(m, inp.width, cfg, name="width")
        lsb_exp = Signal(signed(cfg.exp_bits + 1), name="lsb_exp")   # E - (m - 1)
        m.d.comb += lsb_exp.eq(inp.group.exp - width + 1)
        with m.If(load):
            m.d.sync += [
                self.o.valid.eq(self.i.valid),
                self.o.payload.flags.eq(inp.flags),
            ]
        for j in range(cfg.group_size):
            elem = inp.group.elems[j]
            bits = round_to_fp32(m, sign=elem.sign, exp=lsb_exp, sig=elem.mag, name=f"e{j}")
            with m.If(load):
                m.d.sync += self.o.payload.data[j].eq(bits)
        return m


def _params(preset: str) -> dict:
    cfg = BFPConfig.preset(preset)
    return {
        **cfg.to_dict(),
        "latency": BFPToFP32.latency,
        "widths": list(cfg.widths),
        "width_bits": width_shape(cfg).width,
        "i_payload_bits": bfp_stream_layout(cfg).size,
        "o_payload_bits": fp32_out_layout(cfg).size,
        "i_fields": layout_fields(bfp_stream_layout(cfg)),
        "o_fields": layout_fields(fp32_out_layout(cfg)),
    }


TESSERA_BLOCKS = [
    Block("bfp_to_fp32", build=lambda preset: BFPToFP32(config=BFPConfig.preset(preset)),
          params=_params),
]
