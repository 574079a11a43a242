"""FP32 -> FAST block floating point converter (DESIGN-NOTES §1).

Golden model: :mod:`sim.bfp` (bit-exact, including the LFSR). Format, layouts and policies:
``docs/bfp.md``.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import BFPConfig
from ..formats import BFPFlags, bfp_group_layout, fp32_group_layout
from ..registry import Block
from .lfsr import LFSR_TAPS, LFSR_WIDTH, BFPNoise

__all__ = ["Rounding", "E_ZERO", "width_shape", "fp32_stream_layout", "bfp_stream_layout",
           "decode_width", "layout_fields", "BFPConverter"]

#: Shared exponent of an all-zero (or NaN/Inf) group: one below any real group's exponent.
E_ZERO = -150


class Rounding(enum.Enum, shape=2):
    """Rounding mode of a group, chosen per group at run time (``sim.bfp.ROUND_*``).

    Code 3 is reserved and behaves (and is echoed) as ``TRUNCATE``.
    """

    NEAREST = 0      #: round to nearest, ties to even
    STOCHASTIC = 1   #: add ``noise_bits`` LFSR bits below the LSB, then truncate
    TRUNCATE = 2     #: toward zero (stochastic with the noise forced to zero)


def width_shape(config: BFPConfig):
    """Shape of a run-time width field: holds ``m`` itself (4 bits when max_mantissa = 8)."""
    return unsigned(config.max_mantissa.bit_length())


def fp32_stream_layout(config: BFPConfig) -> data.StructLayout:
    """Converter input payload, LSB first: ``data`` (``group_size`` FP32 words, element 0 in the
    low bits) | ``width`` (``m``) | ``rounding`` (:class:`Rounding`)."""
    return data.StructLayout({
        "data": fp32_group_layout(config),
        "width": width_shape(config),
        "rounding": Rounding,
    })


def bfp_stream_layout(config: BFPConfig) -> data.StructLayout:
    """A BFP group on a stream (converter output, :class:`BFPToFP32` input), LSB first:
    ``group`` (:func:`hdl.formats.bfp_group_layout`: ``exp`` | ``elems[i]`` = ``mag`` | ``sign``)
    | ``width`` (``m`` used) | ``rounding`` (mode used) | ``flags`` (``invalid`` | ``overflow``)."""
    return data.StructLayout({
        "group": bfp_group_layout(config),
        "width": width_shape(config),
        "rounding": Rounding,
        "flags": BFPFlags,
    })


def layout_fields(layout: data.Layout) -> dict:
    """``{field: [offset, width]}`` of a layout's top-level fields (JSON-friendly)."""
    return {name: [field.offset, field.width] for name, field in layout}


def decode_width(m: Module, code, config: BFPConfig, *, name: str):
    """Width actually used for a ``width`` field value: ``2 * clamp(code // 2, 1, mm // 2)``
    (legal widths unchanged; other codes go to the nearest legal width below, like the fMAC)."""
    half = code >> 1
    top = config.max_mantissa // 2
    eff = Signal(width_shape(config), name=name)
    m.d.comb += eff.eq(Mux(half == 0, 2, Mux(half > top, 2 * top, Cat(Const(0, 1), half))))
    return eff


def decode_rounding(m: Module, code, *, name: str):
    """Rounding mode actually used: the reserved code 3 behaves as ``TRUNCATE``."""
    eff = Signal(Rounding, name=name)
    raw = code.as_value()
    m.d.comb += eff.eq(Mux(raw == 3, Rounding.TRUNCATE, raw))
    return eff


class BFPConverter(wiring.Component):
    """Stream converter FP32 -> BFP, one group of ``group_size`` values per cycle.

    Number format: in, IEEE 754 binary32 (subnormals exact); out, a BFP group (shared signed
    exponent ``E = floor(log2(max|x|))``, per element sign and ``m``-bit magnitude ``M``, value
    ``(-1)**sign * M * 2**(E - (m - 1))``). Width ``m`` and :class:`Rounding` come with every
    group and are echoed with it. All-zero group: ``E = -150``, ``M = 0``. A group with a NaN
    (Inf) sets its ``invalid`` (``overflow``) flag and is output as ``E = -150``, all
    ``sign = M = 0``. ``M`` rounding up to ``2**m`` saturates to ``2**m - 1``.

    Pipeline: 2 stages (decode + group maximum + shared exponent | align + round + saturate),
    ``latency = 2`` cycles from input transfer to output valid; one group per cycle without
    backpressure; bubbles are squeezed out under backpressure. The LFSR (:class:`BFPNoise`)
    advances once per accepted input group, in every rounding mode. Golden model: :mod:`sim.bfp`.

    Parameters
    ----------
    config : BFPConfig
        ``group_size``, ``max_mantissa``, ``exp_bits``, ``noise_bits``, ``lfsr_seed``.

    Members
    -------
    i : In(stream.Signature(fp32_stream_layout(config)))
        FP32 groups with their ``width`` and ``rounding``.
    o : Out(stream.Signature(bfp_stream_layout(config)))
        BFP groups, the width and mode used, and the group's ``flags``.
    flags : Out(BFPFlags)
        Sticky OR of the ``flags`` of every group delivered on ``o`` since reset or the last
        ``clear_flags``.
    clear_flags : In(1)
        Clear ``flags`` at the next edge (a flagged group delivered in the same cycle still
        sets them).
    """

    latency = 2

    def __init__(self, *, config: BFPConfig):
        if not isinstance(config, BFPConfig):
            raise TypeError(f"BFPConverter.config must be a BFPConfig, not {config!r}")
        self.config = config
        super().__init__({
            "i": In(stream.Signature(fp32_stream_layout(config))),
            "o": Out(stream.Signature(bfp_stream_layout(config))),
            "flags": Out(BFPFlags),
            "clear_flags": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        G, mm, r, eb = cfg.group_size, cfg.max_mantissa, cfg.noise_bits, cfg.exp_bits
        m.submodules.noise = noise = BFPNoise(config=cfg)

        # ---- handshakes: each stage loads when it is empty or its successor loads ----------
        s1_valid = Signal()
        s2_ready = Signal()
        s1_ready = Signal()
        m.d.comb += [
            s2_ready.eq(~self.o.valid | self.o.ready),
            s1_ready.eq(~s1_valid | s2_ready),
            self.i.ready.eq(s1_ready),
            noise.advance.eq(self.i.valid & s1_ready),
        ]

        # ---- stage 1: classify, group maximum magnitude, shared exponent -------------------
        inp = self.i.payload
        in_width = decode_width(m, inp.width, cfg, name="in_width")
        in_rounding = decode_rounding(m, inp.rounding, name="in_rounding")
        nan_any, inf_any = [], []
        mags = []
        for j in range(G):
            word = inp.data[j]
            special = Signal(name=f"in_{j}_special")
            mag = Signal(31, name=f"in_{j}_mag")
            m.d.comb += [
                special.eq(word.exp == 0xFF),
                mag.eq(Mux(special, 0, word.as_value()[:31])),
            ]
            nan_any.append(special & (word.frac != 0))
            inf_any.append(special & (word.frac == 0))
            mags.append(mag)
        level = 0
        while len(mags) > 1:          # comparator tree, IEEE magnitudes order as integers
            nxt = []
            for p in range(0, len(mags) - 1, 2):
                a, b = mags[p], mags[p + 1]
                mx = Signal(31, name=f"max_{level}_{p // 2}")
                m.d.comb += mx.eq(Mux(a > b, a, b))
                nxt.append(mx)
            if len(mags) % 2:
                nxt.append(mags[-1])
            mags, level = nxt, level + 1
        big = mags[0]
        big_exp, big_frac = big[23:31], big[:23]
        big_msb = Signal(range(23), name="big_frac_msb")
        for b in range(23):                       # later statements win: the highest one
            with m.If(big_frac[b]):
                m.d.comb += big_msb.eq(b)
        shared = Signal(signed(10), name="in_shared_exp")
        with m.If(big_exp != 0):
            m.d.comb += shared.eq(big_exp - 127)
        with m.Elif(big_frac != 0):
            m.d.comb += shared.eq(big_msb - 149)
        with m.Else():
            m.d.comb += shared.eq(E_ZERO)

        s1_data = Signal(fp32_group_layout(cfg), name="s1_data")
        s1_width = Signal(width_shape(cfg), name="s1_width")
        s1_rounding = Signal(Rounding, name="s1_rounding")
        s1_noise = Signal(data.ArrayLayout(unsigned(r), G), name="s1_noise")
        s1_exp = Signal(signed(10), name="s1_exp")
        s1_nan = Signal(name="s1_nan")
        s1_inf = Signal(name="s1_inf")
        with m.If(s1_ready):
            m.d.sync += [
                s1_valid.eq(self.i.valid),
                s1_data.eq(inp.data),
                s1_width.eq(in_width),
                s1_rounding.eq(in_rounding),
                s1_noise.eq(noise.noise),
                s1_exp.eq(shared),
                s1_nan.eq(Cat(*nan_any).any()),
                s1_inf.eq(Cat(*inf_any).any()),
            ]

        # ---- stage 2: align each element to the shared exponent, round, saturate -----------
        limit = Signal(mm, name="s1_limit")            # 2**m - 1
        m.d.comb += limit.eq(0)
        for w in cfg.widths:
            with m.If(s1_width == w):
                m.d.comb += limit.eq((1 << w) - 1)
        bad = s1_nan | s1_inf
        low = mm - 1 + r                     # zero bits appended below the significand
        ext_w = 24 + low                     # ext = sig * 2**low; q * 2**r = ext >> k
        out = self.o.payload
        for j in range(G):
            word = s1_data[j]
            sig = Signal(24, name=f"e{j}_sig")
            e_lsb = Signal(signed(10), name=f"e{j}_lsb_exp")
            k_raw = Signal(signed(12), name=f"e{j}_shift_raw")
            k = Signal(range(ext_w + 1), name=f"e{j}_shift")
            ext = Signal(ext_w, name=f"e{j}_ext")
            shifted = Signal(ext_w, name=f"e{j}_shifted")
            sticky_low = Signal(name=f"e{j}_sticky_low")
            m.d.comb += [
                sig.eq(Cat(word.frac, word.exp != 0)),
                e_lsb.eq(Mux(word.exp == 0, -149, word.exp - 150)),
                k_raw.eq(s1_exp - e_lsb + (mm - s1_width)),
                k.eq(Mux(k_raw < 0, 0, Mux(k_raw > ext_w, ext_w, k_raw))),
                ext.eq(Cat(Const(0, low), sig)),
                shifted.eq(ext >> k),
                sticky_low.eq(Cat(*[ext[b] & (k > b) for b in range(low, ext_w)]).any()),
            ]
            integer = shifted[r:r + mm]
            fraction = shifted[:r]
            sticky = sticky_low if r == 1 else (fraction[:r - 1].any() | sticky_low)
            up_rne = fraction[r - 1] & (sticky | integer[0])
            sum_sr = Signal(r + 1, name=f"e{j}_noise_sum")
            m.d.comb += sum_sr.eq(fraction + s1_noise[j])
            up = Signal(name=f"e{j}_round_up")
            with m.Switch(s1_rounding):
                with m.Case(Rounding.NEAREST):
                    m.d.comb += up.eq(up_rne)
                with m.Case(Rounding.STOCHASTIC):
                    m.d.comb += up.eq(sum_sr[r])
                with m.Default():
                    m.d.comb += up.eq(0)
            total = Signal(mm + 1, name=f"e{j}_rounded")
            mag = Signal(mm, name=f"e{j}_mag")
            m.d.comb += [
                total.eq(integer + up),
                mag.eq(Mux(total > limit, limit, total)),
            ]
            with m.If(s2_ready):
                m.d.sync += [
                    out.group.elems[j].mag.eq(Mux(bad, 0, mag)),
                    out.group.elems[j].sign.eq(Mux(bad, 0, word.sign)),
                ]
        with m.If(s2_ready):
            m.d.sync += [
                self.o.valid.eq(s1_valid),
                out.group.exp.eq(Mux(bad, E_ZERO, s1_exp)),
                out.width.eq(s1_width),
                out.rounding.eq(s1_rounding),
                out.flags.invalid.eq(s1_nan),
                out.flags.overflow.eq(s1_inf),
            ]

        # ---- sticky status -------------------------------------------------------------------
        transfer = self.o.valid & self.o.ready
        m.d.sync += [
            self.flags.invalid.eq((self.flags.invalid & ~self.clear_flags)
                                  | (transfer & out.flags.invalid)),
            self.flags.overflow.eq((self.flags.overflow & ~self.clear_flags)
                                   | (transfer & out.flags.overflow)),
        ]
        return m


def _params(preset: str) -> dict:
    cfg = BFPConfig.preset(preset)
    return {
        **cfg.to_dict(),
        "latency": BFPConverter.latency,
        "widths": list(cfg.widths),
        "width_bits": width_shape(cfg).width,
        "rounding": {mode.name.lower(): mode.value for mode in Rounding},
        "e_zero": E_ZERO,
        "lfsr": {"width": LFSR_WIDTH, "taps": list(LFSR_TAPS), "steps_per_group": cfg.noise_bits},
        "i_payload_bits": fp32_stream_layout(cfg).size,
        "o_payload_bits": bfp_stream_layout(cfg).size,
        "i_fields": layout_fields(fp32_stream_layout(cfg)),
        "o_fields": layout_fields(bfp_stream_layout(cfg)),
        "group_fields": layout_fields(bfp_group_layout(cfg)),
        "elem_bits": cfg.max_mantissa + 1,
    }


TESSERA_BLOCKS = [
    Block("bfp_converter", build=lambda preset: BFPConverter(config=BFPConfig.preset(preset)),
          params=_params),
]
