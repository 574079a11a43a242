"""Link codecs: FP32 words or BFP groups to flits and back (docs/multicore.md, "Compression").

A :class:`LinkTxCodec` sits between a collective engine's ``tx`` and a flit-level
:class:`~hdl.multi.link.Link` (``word_bits = width``); a :class:`LinkRxCodec` between the link
and the next engine's ``rx``. The engine's ``mode`` (held for a whole command) chooses per run:

* ``CollComp.NONE``: each FP32 word is ``32 / width`` flits, least significant first;
* ``CollComp.BFP``: ``group_size`` words are quantized by :class:`~hdl.bfp.BFPConverter`
  (width ``mode.width``, rounding ``mode.rounding``: nearest even, stochastic with the
  converter's LFSR, or truncation), packed densely as
  ``exp | sign_0 mag_0 | sign_1 mag_1 | ...`` (``mag_j`` its low ``width`` bits;
  :func:`~hdl.multi.config.bfp_packet_bits` bits) and sent as
  ``ceil(bits / width_of_a_flit)`` flits; the receiver unpacks them and decodes with
  :class:`~hdl.bfp.BFPToFP32`. Every group the converter makes decodes exactly, so a decoded
  group sent again is the same group (relaying is exact, in every rounding mode: a decoded
  group has no bits below its last mantissa bit, so stochastic noise never carries). A group holding a NaN or an
  infinity is sent as a *NaN group* (exponent field :func:`~hdl.multi.config.nan_group_exp`,
  which no converter group has, mantissas zero) and arrives as ``group_size`` canonical NaNs
  ``0x7FC00000``, so a non-finite gradient reaches every core of an all-reduce as it does over
  FP32 links (a NaN arriving is sent on as a NaN group again); the transmit codec's ``flags``
  say that it sent one.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..bfp.converter import BFPConverter, Rounding, width_shape
from ..bfp.to_fp32 import BFPToFP32
from ..config import BFPConfig, check_int
from ..formats import BFPFlags
from ..fp32.unpack import QNAN
from ..lib.mustuse import used_if_rejected
from .config import flits_per_group, nan_group_exp

__all__ = ["mode_layout", "LinkTxCodec", "LinkRxCodec"]


def mode_layout(config: BFPConfig) -> data.StructLayout:
    """``comp`` (:class:`~hdl.multi.config.CollComp`) | ``width`` (BFP mantissa width) |
    ``rounding`` (:class:`~hdl.bfp.converter.Rounding` of the transmit converter; the
    converter's LFSR steps ``noise_bits`` times per group in every mode, so a stochastic
    group's noise depends on every group this codec converted since reset)."""
    return data.StructLayout({"comp": 1, "width": width_shape(config), "rounding": Rounding})


def check_flit_args(self, flit_bits, bfp_config):
    """Raise ``ValueError`` / ``TypeError`` naming ``type(self)`` for a bad ``flit_bits`` or
    ``bfp_config`` (and mark ``self`` used, so the rejected component warns of nothing)."""
    with used_if_rejected(self):
        check_int(type(self).__name__, "flit_bits", flit_bits, lo=1, hi=32)
        if 32 % flit_bits:
            raise ValueError(f"{type(self).__name__}.flit_bits must divide 32, not "
                             f"{flit_bits!r}")
        if not isinstance(bfp_config, BFPConfig):
            raise TypeError(f"{type(self).__name__}.bfp_config must be a BFPConfig, not "
                            f"{type(bfp_config).__name__}")


class _Geometry:
    """Flit counts shared by both codecs."""

    def __init__(self, flit_bits: int, cfg: BFPConfig):
        self.W, self.cfg = flit_bits, cfg
        self.k = 32 // flit_bits                       # flits per FP32 word
        self.n = {m: flits_per_group(cfg, m, flit_bits) for m in cfg.widths}
        self.units = max(self.k, *self.n.values())     # most flits of one unit
        self.bits = self.units * flit_bits             # the unit buffer


class LinkTxCodec(wiring.Component):
    """FP32 words -> flits, plain or as BFP groups (transmit side).

    Parameters
    ----------
    flit_bits : int
        Flit width, a divisor of 32.
    bfp_config : BFPConfig

    Members
    -------
    i : In(stream.Signature(32))
    o : Out(stream.Signature(flit_bits))
    mode : In(mode_layout(bfp_config))
        Hold it while words are in flight.
    flags : Out(BFPFlags)
        Sticky: a group with a NaN (``invalid``) or an infinity (``overflow``) was sent (as a
        NaN group) since reset or the last ``clear_flags``.
    clear_flags : In(1)
    idle : Out(1)
        No word is held (none gathered, none in the converter, no flit left to send): ``mode``
        may change.
    """

    def __init__(self, *, flit_bits: int, bfp_config: BFPConfig):
        check_flit_args(self, flit_bits, bfp_config)
        self.geometry = _Geometry(flit_bits, bfp_config)
        super().__init__({
            "i": In(stream.Signature(32)), "o": Out(stream.Signature(flit_bits)),
            "mode": In(mode_layout(bfp_config)), "flags": Out(BFPFlags), "clear_flags": In(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.geometry
        cfg, W, G = g.cfg, g.W, g.cfg.group_size
        comp = self.mode.comp

        # ---- the flit serializer: one unit (a word or a packed group) at a time ------------
        sh = Signal(g.bits, name="flit_shift")
        left = Signal(range(g.units + 1), name="flits_left")
        can_load = Signal(name="can_load")
        load = Signal(name="load")
        load_val = Signal(g.bits, name="load_val")
        load_n = Signal(range(g.units + 1), name="load_n")
        m.d.comb += [self.o.valid.eq(left != 0), self.o.payload.eq(sh[:W]),
                     can_load.eq((left == 0) | ((left == 1) & self.o.ready))]
        with m.If(load):
            m.d.sync += [sh.eq(load_val), left.eq(load_n)]
        with m.Elif(self.o.valid & self.o.ready):
            m.d.sync += [sh.eq(sh >> W), left.eq(left - 1)]

        # ---- BFP: gather a group, convert, pack --------------------------------------------
        m.submodules.conv = conv = BFPConverter(config=cfg)
        m.d.comb += [self.flags.eq(conv.flags), conv.clear_flags.eq(self.clear_flags)]
        gbuf = Signal(32 * G, name="group_words")
        gcnt = Signal(range(G + 1), name="group_count")
        with m.If(self.i.valid & self.i.ready & comp):
            m.d.sync += [gbuf.eq(Cat(gbuf[32:], self.i.payload)), gcnt.eq(gcnt + 1)]
        with m.If(conv.i.valid & conv.i.ready):
            m.d.sync += gcnt.eq(0)
        m.d.comb += [
            conv.i.valid.eq(comp & (gcnt == G)),
            conv.i.payload.data.eq(gbuf),
            conv.i.payload.width.eq(self.mode.width),
            conv.i.payload.rounding.eq(self.mode.rounding),
            conv.o.ready.eq(comp & can_load),
        ]
        in_conv = Signal(range(conv.latency + 2), name="groups_in_converter")
        m.d.sync += in_conv.eq(in_conv + (conv.i.valid & conv.i.ready)
                               - (conv.o.valid & conv.o.ready))
        m.d.comb += self.idle.eq((gcnt == 0) & (in_conv == 0) & (left == 0))
        grp = conv.o.payload.group
        # a NaN / Inf group (the converter's mantissas are all zero) goes as a NaN group
        exp = Signal(cfg.exp_bits, name="packet_exp")
        m.d.comb += exp.eq(Mux(conv.o.payload.flags.as_value().any(), nan_group_exp(cfg),
                               grp.exp))
        packed = {mw: Cat(exp, *[Cat(e.sign, e.mag[:mw]) for e in grp.elems])
                  for mw in cfg.widths}

        with m.If(comp):
            m.d.comb += [self.i.ready.eq(gcnt != G), load.eq(conv.o.valid & can_load)]
            with m.Switch(self.mode.width):
                for mw in cfg.widths:
                    with m.Case(mw):
                        m.d.comb += [load_val.eq(packed[mw]), load_n.eq(g.n[mw])]
                with m.Default():      # never in a run (the engine refuses other widths)
                    top = cfg.max_mantissa
                    m.d.comb += [load_val.eq(packed[top]), load_n.eq(g.n[top])]
        with m.Else():
            m.d.comb += [self.i.ready.eq(can_load), load.eq(self.i.valid & can_load),
                         load_val.eq(self.i.payload), load_n.eq(g.k)]
        return m


class LinkRxCodec(wiring.Component):
    """Flits -> FP32 words, plain or from BFP groups (receive side).

    Parameters
    ----------
    flit_bits : int
        Flit width, a divisor of 32.
    bfp_config : BFPConfig

    Members
    -------
    i : In(stream.Signature(flit_bits))
    o : Out(stream.Signature(32))
    mode : In(mode_layout(bfp_config))
        The same mode as the sending codec's; hold it while words are in flight.
    enable : In(1)
        Flits are taken only while 1 (the receiving engine runs the command they belong to),
        so flits of the next command, maybe in another mode, wait on the link until ``mode``
        is theirs.
    """

    def __init__(self, *, flit_bits: int, bfp_config: BFPConfig):
        check_flit_args(self, flit_bits, bfp_config)
        self.geometry = _Geometry(flit_bits, bfp_config)
        super().__init__({
            "i": In(stream.Signature(flit_bits)), "o": Out(stream.Signature(32)),
            "mode": In(mode_layout(bfp_config)), "enable": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.geometry
        cfg, W, G, B = g.cfg, g.W, g.cfg.group_size, g.bits
        comp = self.mode.comp
        eb = cfg.exp_bits

        # ---- deserializer: flits shift in at the top; a unit is the top ``need`` flits -----
        buf = Signal(B, name="flit_buf")
        got = Signal(range(g.units + 1), name="flits_got")
        full = Signal(name="unit_full")
        need = Signal(range(g.units + 1), name="flits_need")
        with m.If(comp):
            with m.Switch(self.mode.width):
                for mw in cfg.widths:
                    with m.Case(mw):
                        m.d.comb += need.eq(g.n[mw])
                with m.Default():
                    m.d.comb += need.eq(g.n[cfg.max_mantissa])
        with m.Else():
            m.d.comb += need.eq(g.k)
        consumed = Signal(name="unit_consumed")       # the full unit leaves this cycle
        m.d.comb += self.i.ready.eq(self.enable & (~full | consumed))

        # ---- output: a word, or the G words of a decoded group, one per cycle --------------
        obuf = Signal(32 * G, name="out_words")
        ocnt = Signal(range(G + 1), name="out_count")
        out_free = Signal(name="out_free")
        m.d.comb += [self.o.valid.eq(ocnt != 0), self.o.payload.eq(obuf[:32]),
                     out_free.eq((ocnt == 0) | ((ocnt == 1) & self.o.ready))]
        out_load = Signal(name="out_load")
        with m.If(self.o.valid & self.o.ready):     # a load below overrides (same cycle)
            m.d.sync += [obuf.eq(obuf >> 32), ocnt.eq(ocnt - 1)]

        m.submodules.dec = dec = BFPToFP32(config=cfg)
        grp = dec.i.payload.group
        with m.Switch(self.mode.width):
            for mw in cfg.widths:
                with m.Case(mw):
                    packed = buf[B - g.n[mw] * W:]
                    m.d.comb += grp.exp.eq(packed[:eb])
                    for j in range(G):
                        at = eb + j * (mw + 1)
                        m.d.comb += [grp.elems[j].sign.eq(packed[at]),
                                     grp.elems[j].mag.eq(packed[at + 1:at + 1 + mw])]
        # a NaN group travels through the decoder as its ``invalid`` flag
        m.d.comb += [dec.i.payload.width.eq(self.mode.width),
                     dec.i.payload.rounding.eq(Rounding.NEAREST),
                     dec.i.payload.flags.invalid.eq(grp.exp.as_unsigned() == nan_group_exp(cfg)),
                     dec.i.payload.flags.overflow.eq(0),
                     dec.i.valid.eq(comp & full),
                     dec.o.ready.eq(comp & out_free)]
        with m.If(comp):
            m.d.comb += [out_load.eq(dec.o.valid & out_free),
                         consumed.eq(dec.i.valid & dec.i.ready)]
            with m.If(out_load):
                m.d.sync += [obuf.eq(Mux(dec.o.payload.flags.invalid,
                                         Cat(*[Const(QNAN, 32)] * G),
                                         dec.o.payload.data)),
                             ocnt.eq(G)]
        with m.Else():
            m.d.comb += [out_load.eq(full & out_free), consumed.eq(out_load)]
            with m.If(out_load):
                m.d.sync += [obuf.eq(buf[B - 32:]), ocnt.eq(1)]
        with m.If(consumed):
            m.d.sync += full.eq(0)
        # a flit may enter while the full unit leaves (the unit is read before this edge);
        # written after the clear so a unit completed in the same cycle stays full
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [buf.eq(Cat(buf[W:], self.i.payload)), got.eq(got + 1)]
            with m.If(got == need - 1):
                m.d.sync += [full.eq(1), got.eq(0)]
        return m
