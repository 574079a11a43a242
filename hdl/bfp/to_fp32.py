"""FAST block floating point -> FP32 converter (the inverse of :class:`BFPConverter`).

Golden model: :func:`sim.model.bfp.dequantize` / :class:`sim.model.bfp.BFPToFP32Model`. See
``docs/bfp.md``.
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import BFPConfig
from ..formats import BFPFlags, fp32_group_layout
from ..fp32.round import (MIN_NORM_WIDTH, count_leading_zeros, round_finish, round_plan_lz,
                          round_prepare, shift_left)
from ..lib.mustuse import check_config_type
from ..registry import Block
from .converter import bfp_stream_layout, layout_fields, width_shape
from .pipeline import StallAll

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

    Pipeline: the shared FP32 rounding of :mod:`hdl.fp32.round` in stages (the same results
    as :func:`~hdl.fp32.round.round_to_fp32`): the group's exponent terms (``round_plan_pre``'s
    ``base_pre``/``ovf_lim``, one adder each) and every ``M``'s leading-zero count and
    normalising shift | ``round_plan_lz`` (subnormal shift, biased exponent, overflow) |
    ``round_prepare`` (alignment onto the subnormal grid, 24 bits + guard + sticky) |
    ``round_finish`` (nearest-even increment and packing; output register). ``latency = 4``;
    stall-all (every register loads when ``~o.valid | o.ready``), one group per cycle without
    backpressure.

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

    latency = 4

    def __init__(self, *, config: BFPConfig):
        check_config_type(self, config, BFPConfig)
        self.config = config
        super().__init__({
            "i": In(stream.Signature(bfp_stream_layout(config))),
            "o": Out(stream.Signature(fp32_out_layout(config))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        G, mm, eb = cfg.group_size, cfg.max_mantissa, cfg.exp_bits
        nw = MIN_NORM_WIDTH             # width of the normalised significand (M at its top)
        inp = self.i.payload
        st = StallAll(m, i=self.i, o=self.o, name="pipe")

        # ---- stage 0: exponent terms of the group; normalise every magnitude -----------------
        # norm = (M << lz) at the top of nw bits has its LSB at
        # x = E - (m - 1) - lz - (nw - mm); round_plan_pre(x + lz) would give
        # base_pre = x + lz + nw + 125 and ovf_lim = x + lz + nw - 129, i.e. E plus a constant
        # of the width code: one adder each (no chained carries).
        ew = max(eb, 10) + 2
        c_base = Signal(signed(9), name="base_pre_const")
        c_ovf = Signal(signed(9), name="ovf_lim_const")
        with m.Switch(inp.width):
            for code in range(1 << len(inp.width)):
                w = _decoded_width(code, cfg)
                with m.Case(code):
                    m.d.comb += [c_base.eq(mm - w + 126), c_ovf.eq(mm - w - 128)]
        base_pre = Signal(signed(ew), name="base_pre")
        ovf_lim = Signal(signed(ew), name="ovf_lim")
        m.d.comb += [base_pre.eq(inp.group.exp + c_base), ovf_lim.eq(inp.group.exp + c_ovf)]
        lzs, nhs, zeros, signs = [], [], [], []
        for j in range(G):
            elem = inp.group.elems[j]
            lz = count_leading_zeros(m, elem.mag, name=f"e{j}")
            nh = Signal(mm, name=f"e{j}_norm")
            m.d.comb += nh.eq(shift_left(elem.mag, lz, mm))
            lzs.append(lz)
            nhs.append(nh)
            zeros.append(elem.mag == 0)
            signs.append(elem.sign)
        v = st.valid(self.i.valid, name="s0_valid")
        pre = SimpleNamespace(base_pre=st.reg(base_pre, name="s0_base_pre"),
                              ovf_lim=st.reg(ovf_lim, name="s0_ovf_lim"))
        flags = st.reg(inp.flags, name="s0_flags")
        lzs = [st.reg(x, name=f"s0_e{j}_lz") for j, x in enumerate(lzs)]
        nhs = [st.reg(x, name=f"s0_e{j}_norm") for j, x in enumerate(nhs)]
        zeros = [st.reg(x, name=f"s0_e{j}_zero", shape=1) for j, x in enumerate(zeros)]
        signs = [st.reg(x, name=f"s0_e{j}_sign") for j, x in enumerate(signs)]

        # ---- stage 1: subnormal shift, biased exponent, overflow ----------------------------
        plans = [round_plan_lz(m, pre=pre, lz=lzs[j], width=nw, name=f"e{j}_rnd")
                 for j in range(G)]
        v = st.valid(v, name="s1_valid")
        flags = st.reg(flags, name="s1_flags")
        plans = [SimpleNamespace(shift=st.reg(p.shift, name=f"s1_e{j}_shift"),
                                 base=st.reg(p.base, name=f"s1_e{j}_base"),
                                 ovf=st.reg(p.ovf, name=f"s1_e{j}_ovf"))
                 for j, p in enumerate(plans)]
        nhs = [st.reg(x, name=f"s1_e{j}_norm") for j, x in enumerate(nhs)]
        zeros = [st.reg(x, name=f"s1_e{j}_zero") for j, x in enumerate(zeros)]
        signs = [st.reg(x, name=f"s1_e{j}_sign") for j, x in enumerate(signs)]

        # ---- stage 2: align subnormal results, keep 24 bits + guard + sticky ----------------
        preps = [round_prepare(m, norm=Cat(Const(0, nw - mm), nhs[j]), plan=plans[j],
                               name=f"e{j}_rnd") for j in range(G)]
        v = st.valid(v, name="s2_valid")
        flags = st.reg(flags, name="s2_flags")
        preps = [SimpleNamespace(frame=st.reg(p.frame, name=f"s2_e{j}_frame"),
                                 base=st.reg(p.base, name=f"s2_e{j}_base"),
                                 ovf=st.reg(p.ovf, name=f"s2_e{j}_ovf"))
                 for j, p in enumerate(preps)]
        zeros = [st.reg(x, name=f"s2_e{j}_zero") for j, x in enumerate(zeros)]
        signs = [st.reg(x, name=f"s2_e{j}_sign") for j, x in enumerate(signs)]

        # ---- stage 3: nearest-even increment and packing (output register) ------------------
        with m.If(st.en):
            m.d.sync += [self.o.valid.eq(v), self.o.payload.flags.eq(flags)]
            for j in range(G):
                bits = round_finish(m, sign=signs[j], frame=preps[j].frame, base=preps[j].base,
                                    ovf=preps[j].ovf, name=f"e{j}_rnd")
                m.d.sync += self.o.payload.data[j].eq(
                    Mux(zeros[j], Cat(Const(0, 31), signs[j]), bits))
        return m


def _decoded_width(code: int, config: BFPConfig) -> int:
    """:func:`decode_width` at elaboration time (the same clamp)."""
    return 2 * min(max(code >> 1, 1), config.max_mantissa // 2)


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
