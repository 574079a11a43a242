"""The local passes of a top-k all-reduce: compress (error feedback and selection) and the
rank-order sum of the gathered messages (docs/multicore.md, *Top-k compression in hardware*).

The collective engine (:class:`hdl.multi.collective.CollectiveEngine`) runs a top-k
all-reduce as ``COMPRESS``, then ``N - 1`` all-gather steps of the messages over the ring, then
``SUM``; this block does the two local passes through the engine's memory port
(:class:`~hdl.lib.memport.WordPort`, one read and one write per cycle).

``COMPRESS`` (``base``: the gradient, ``length`` words; ``rbase``: the residual, ``length``
words; ``gbase``: where the message goes), segment by segment (``seg`` words, the last may be
shorter):

* per word, two cycles: read ``grad[i]``, read ``residual[i]``; ``acc = grad + residual``
  (:class:`~hdl.fp32.add.FP32Add`); ``residual[i] = acc`` and ``grad[i] = +0`` are written
  (the gradient region becomes the zeroed accumulator of ``SUM``), and ``acc`` goes to the
  selection unit (:class:`~hdl.multi.topk_select.TopKSelect`);
* then, one write per cycle, the segment's part of the message (the format of
  :class:`~hdl.multi.config.TopK`: index words, then values, in selection order) and ``+0``
  over the residual of every selected word, so the residual is ``acc`` with the sent words
  replaced by ``+0``.

``SUM`` (``base``, ``length``: the zeroed result; ``gbase``: ``ranks`` messages of ``mlen``
words, rank 0's first): message by message in rank order, per segment it reads the index
words, then per pair the value and the result word, adds (``result + value``) and writes the
sum back. Within a message the indices differ; between messages the adder drains (a pair of
the next message may hit the same word). So ``result = ((+0 + s_0) + s_1) + ...`` over the
sent words, the golden model's rank-order sum.

Cycles (``L``: the adder's latency): ``COMPRESS``: per segment of ``n`` words with
``n_sel = min(k, n)`` selected, ``2n + L + 2`` for the stream and ``ceil(n_sel / per_word) +
2 n_sel`` for the message and the residual's zeros, plus 2; ``SUM``: per message, per segment
``ceil(n_sel / per_word) + 2 n_sel + 1``, and ``L + 2`` to drain.

Golden model: :func:`sim.model.compress.topk_ring`.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..fp32.add import FP32Add
from ..fp32.config import FP32Config
from ..lib.memport import WordPort
from ..lib.dataflow import check_units, unit_members
from ..lib.delay import delay, delay_stages
from ..lib.mustuse import mark_used, used_if_rejected
from .config import CollectiveConfig
from .topk_select import TopKSelect

__all__ = ["TopKPass", "TopKOp", "pass_layout", "message_words"]


def message_words(m: Module, length, topk, *, name: str) -> Signal:
    """A combinational ``Signal`` of ``topk.message_words(length)`` for the unsigned value
    ``length`` (``topk.seg`` a power of two): the message words of a vector of ``length``
    words (:class:`~hdl.multi.config.TopK`). Used by the engine's command check and the core's
    instruction check, so the two agree."""
    lg = topk.seg.bit_length() - 1
    width = len(length)
    last = Signal(lg, name=f"{name}_last")
    last_words = Signal(range(topk.segment_words(topk.k) + 1), name=f"{name}_last_words")
    m.d.comb += last.eq(length[:lg])
    with m.Switch(Mux(last < topk.k, last, topk.k)):
        for v in range(topk.k + 1):
            with m.Case(v):
                m.d.comb += last_words.eq(topk.segment_words(v))
    out = Signal(width + 6, name=name)
    m.d.comb += out.eq((length >> lg) * topk.segment_words(topk.seg) + last_words)
    return out


class TopKOp:
    """The pass a :class:`TopKPass` command runs."""
    COMPRESS = 0
    SUM = 1


def pass_layout(config: CollectiveConfig) -> data.StructLayout:
    """``op`` (:class:`TopKOp`), ``base``, ``length``, ``rbase`` (``COMPRESS``: the residual),
    ``gbase`` (``COMPRESS``: this rank's message; ``SUM``: the first message), ``mlen``
    (``SUM``: words per message)."""
    ab, lb = config.addr_bits, config.len_bits
    return data.StructLayout({"op": 1, "base": ab, "length": lb, "rbase": ab, "gbase": ab,
                              "mlen": lb})


class TopKPass(wiring.Component):
    """``COMPRESS`` and ``SUM`` passes of a top-k all-reduce over one memory port.

    Parameters
    ----------
    config : CollectiveConfig
        ``topk`` must not be ``None``.
    fp32_config : FP32Config
        The adder's pipeline.
    units : tuple of str
        ``()`` (default): the pass has an :class:`~hdl.fp32.add.FP32Add` of its own.
        ``("add",)``: its adds go out on ``unit_add0`` (:class:`~hdl.lib.dataflow.UnitPort`)
        to an adder of ``fp32_config`` placed straight behind the port, the result expected
        ``fp32_config.latency("fp32_add")`` cycles after ``valid`` (the collective engine
        lends its reduce-scatter adder, idle during a top-k all-reduce; one FP32 adder less).

    Members
    -------
    mem : Out(WordPort(addr_bits=config.addr_bits))
    cmd : In(stream.Signature(pass_layout(config)))
        Accepted while idle; the command's regions must lie inside the memory and not
        overlap (the engine checks them).
    busy : Out(1)
        From the cycle after a command is accepted until its last write is done.
    unit_add0 : Out(UnitPort("add"))
        With ``units=("add",)``: the adds (``grad + residual``, ``result + value``).
    """

    def __init__(self, *, config: CollectiveConfig, fp32_config: FP32Config | None = None,
                 units=()):
        if not isinstance(config, CollectiveConfig):
            mark_used(self)
            raise TypeError(f"config must be a CollectiveConfig, not {type(config).__name__}")
        if config.topk is None:
            mark_used(self)
            raise ValueError("TopKPass needs a CollectiveConfig with topk set, not None")
        with used_if_rejected(self):
            self.units = check_units("TopKPass", units, {"add": 1})
        self.config = config
        self.fp32_config = fp32_config or FP32Config()
        super().__init__({
            "mem": Out(WordPort(addr_bits=config.addr_bits)),
            "cmd": In(stream.Signature(pass_layout(config))),
            "busy": Out(1),
            **unit_members(self.units),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        tk = cfg.topk
        K, SEG, PW = tk.k, tk.seg, tk.per_word
        IB = max(1, tk.index_bits)
        IW_MAX = -(-K // PW)
        ab, lb = cfg.addr_bits, cfg.len_bits
        port = self.mem

        m.submodules.sel = sel = TopKSelect(config=tk)
        L = self.fp32_config.latency("fp32_add")
        add_iv = Signal(name="add_in_valid")
        add_ov = Signal(name="add_out_valid")
        add_a, add_b, add_out = (Signal(32, name=f"add_{x}") for x in ("a", "b", "out"))
        if self.units:
            # the lent adder never stalls: its results come L cycles later, valid beside them
            ext = self.unit_add0
            m.d.comb += [ext.valid.eq(add_iv), ext.ops.eq(Cat(add_a, add_b, Const(0, 1))),
                         add_out.eq(ext.result)]
            v = add_iv
            for s in range(L):
                nv = Signal(name=f"add_valid{s + 1}")
                m.d.sync += nv.eq(v)
                v = nv
            m.d.comb += add_ov.eq(v)
        else:
            m.submodules.add = add = FP32Add(config=self.fp32_config)
            m.d.comb += [add.i.valid.eq(add_iv), add.i.payload.a.eq(add_a),
                         add.i.payload.b.eq(add_b), add.i.payload.sub.eq(0),
                         add.o.ready.eq(1), add_ov.eq(add.o.valid), add_out.eq(add.o.payload)]

        c = Signal(pass_layout(cfg), name="c")          # the running command
        s0 = Signal(lb + 1, name="s0")                   # segment start (offset)
        n = Signal(range(SEG + 1), name="n")             # words of this segment
        # the segment's values below are registers, loaded in SEG2 from ``n`` (set in SEG)
        # and ``s0``: the passes' addresses and conditions then start at registers
        nsel_n = Signal(range(K + 1), name="nsel_next")
        iw_n = Signal(range(IW_MAX + 1), name="iw_next")
        m.d.comb += nsel_n.eq(Mux(n < K, n, K))
        with m.Switch(nsel_n):
            for v in range(K + 1):
                with m.Case(v):
                    m.d.comb += iw_n.eq(-(-v // PW))
        nsel = Signal(range(K + 1), name="nsel")         # words selected in this segment
        iw = Signal(range(IW_MAX + 1), name="iw")        # index words of this segment
        emit_last = Signal(range(IW_MAX + 2 * K + 1), name="emit_last")   # iw + 2 nsel - 1
        v = Signal(range(2 * K + 1), name="v")           # EMIT: e - iw (once e >= iw)
        vz = Signal(range(K), name="vz")                 # EMIT: e - iw - nsel (once >= 0)
        gptr = Signal(ab, name="gptr")                   # next message word
        jr = Signal(range(SEG + 1), name="jr")           # reads issued (words or pairs)
        ja = Signal(range(SEG + 1), name="ja")           # accs written (COMPRESS)
        ph = Signal(name="ph")                           # which read of the two
        e = Signal(range(IW_MAX + 2 * K + 1), name="e")  # emit / index-read counter
        q = Signal(range(cfg.ranks + 1), name="q")       # SUM: message
        inflight = Signal(range(SEG + 2), name="inflight")
        idx = Signal(data.ArrayLayout(IB, K), name="idx")   # SUM: the segment's indices

        seg_start = Signal(ab + 1, name="seg_start")     # c.base + s0
        rseg = Signal(ab + 1, name="rseg_start")         # c.rbase + s0
        rest = Signal(lb + 1, name="rest")
        m.d.comb += rest.eq(c.length - s0)

        # ---- adder: COMPRESS grad + residual, SUM result + value -------------------------
        rd0 = Signal(name="rd0")        # the first read of a pair was issued last cycle
        rd1 = Signal(name="rd1")        # the second read was issued last cycle
        first = Signal(32, name="first")   # grad word (COMPRESS) / value word (SUM)
        addr1 = Signal(ab, name="addr1")   # SUM: the result word's address, beside the read
        # the read data comes ML cycles after the read: the flags (and the address) wait
        # ML - 1 cycles more beside it
        ML = cfg.mem_latency
        rd0_data = delay(m, rd0, ML - 1, "rd0")
        rd1_chain = delay_stages(m, rd1, ML - 1, "rd1")
        rd1_data = rd1_chain[-1]
        with m.If(rd0_data):
            m.d.sync += first.eq(port.r_data)
        is_sum = Signal(name="is_sum")
        m.d.comb += is_sum.eq(c.op == 1)
        m.d.comb += [add_iv.eq(rd1_data),
                     add_a.eq(Mux(is_sum, port.r_data, first)),
                     add_b.eq(Mux(is_sum, first, port.r_data))]
        wa = delay(m, addr1, ML - 1, "addr1")
        for s in range(L):
            na = Signal(ab, name=f"wb_addr{s}")
            m.d.sync += na.eq(wa)
            wa = na
        m.d.sync += inflight.eq(inflight + add_iv - add_ov)

        # ---- COMPRESS: the pending +0 write over the gradient word just read ---------------
        zpend = Signal(name="zpend")
        zaddr = Signal(ab, name="zaddr")

        m.d.comb += [sel.i.payload.index.eq(ja), sel.i.payload.word.eq(add_out)]

        cmd = self.cmd.payload
        idx_rd = Signal(name="idx_rd")                   # SUM: an index word was read
        idx_e = Signal(range(IW_MAX + 1), name="idx_e")
        idx_chain = delay_stages(m, idx_rd, ML - 1, "idx_rd")
        idx_data, idx_e_data = idx_chain[-1], delay(m, idx_e, ML - 1, "idx_e")
        # PAIR's second cycle reads at idx[0]: IDX ends only when the index words still in
        # flight are at most the one written at this edge (ML = 1: always)
        idx_waiting = Cat(*idx_chain[:-1]).any() if ML > 1 else Const(0)
        m.d.sync += [rd0.eq(0), rd1.eq(0), idx_rd.eq(0)]
        with m.FSM(name="topk"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [c.eq(cmd), s0.eq(0), gptr.eq(cmd.gbase), q.eq(0)]
                    m.next = "SEG"
            with m.State("SEG"):
                m.d.comb += [self.busy.eq(1), sel.clear.eq(1)]
                m.d.sync += [n.eq(Mux(rest < SEG, rest, SEG)), jr.eq(0), ja.eq(0), ph.eq(0),
                             e.eq(0), v.eq(0), vz.eq(0)]
                m.next = "SEG2"
            with m.State("SEG2"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [nsel.eq(nsel_n), iw.eq(iw_n), emit_last.eq(iw_n + 2 * nsel_n - 1),
                             seg_start.eq(c.base + s0), rseg.eq(c.rbase + s0)]
                with m.If(is_sum):
                    m.next = "IDX"
                with m.Else():
                    m.next = "STREAM"

            # ---- COMPRESS -----------------------------------------------------------------
            with m.State("STREAM"):
                m.d.comb += self.busy.eq(1)
                gread = Signal(name="gread")              # reading a gradient word
                m.d.comb += gread.eq((jr != n) & ~ph)
                with m.If(jr != n):
                    m.d.comb += port.r_en.eq(1)
                    with m.If(~ph):
                        m.d.comb += port.r_addr.eq(seg_start + jr)
                        m.d.sync += [rd0.eq(1), zpend.eq(1), zaddr.eq(seg_start + jr), ph.eq(1)]
                    with m.Else():
                        m.d.comb += port.r_addr.eq(rseg + jr)
                        m.d.sync += [rd1.eq(1), ph.eq(0), jr.eq(jr + 1)]
                with m.If(add_ov):
                    m.d.comb += [port.w_en.eq(1), port.w_addr.eq(rseg + ja),
                                 port.w_data.eq(add_out), sel.i.valid.eq(1)]
                    m.d.sync += ja.eq(ja + 1)
                with m.Elif(zpend):
                    m.d.comb += [port.w_en.eq(1), port.w_addr.eq(zaddr), port.w_data.eq(0)]
                    with m.If(~gread):
                        m.d.sync += zpend.eq(0)
                with m.If((ja == n) & ~zpend & (jr == n)):
                    m.next = "EMIT"
            with m.State("EMIT"):
                m.d.comb += [self.busy.eq(1), port.w_en.eq(1)]
                # counters beside e (all from 0 at SEG): v = e - iw once e >= iw, vz = v - nsel
                # once v >= nsel
                with m.If(e >= iw):
                    m.d.sync += v.eq(v + 1)
                    with m.If(v >= nsel):
                        m.d.sync += vz.eq(vz + 1)
                packed = Signal(32, name="packed")
                with m.Switch(e):
                    for w in range(IW_MAX):
                        with m.Case(w):
                            fields = []
                            for p in range(PW):
                                j = w * PW + p
                                if j < K:
                                    fields.append(Mux(j < nsel, sel.slots[j].index,
                                                      Const(0, IB)))
                            m.d.comb += packed.eq(Cat(*fields))
                with m.If(e < iw):
                    m.d.comb += [port.w_addr.eq(gptr + e), port.w_data.eq(packed)]
                with m.Elif(v < nsel):
                    m.d.comb += [port.w_addr.eq(gptr + e), port.w_data.eq(sel.slots[v].word)]
                with m.Else():
                    m.d.comb += [port.w_addr.eq(rseg + sel.slots[vz].index),
                                 port.w_data.eq(0)]
                m.d.sync += e.eq(e + 1)
                with m.If(e == emit_last):
                    m.d.sync += [gptr.eq(gptr + iw + nsel), s0.eq(s0 + SEG)]
                    with m.If(s0 + SEG >= c.length):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "SEG"

            # ---- SUM ----------------------------------------------------------------------
            with m.State("IDX"):
                m.d.comb += self.busy.eq(1)
                with m.If(e != iw):
                    m.d.comb += [port.r_en.eq(1), port.r_addr.eq(gptr + e)]
                    m.d.sync += [e.eq(e + 1), idx_rd.eq(1), idx_e.eq(e)]
                with m.Elif(~idx_waiting):
                    m.d.sync += [gptr.eq(gptr + iw), jr.eq(0), ph.eq(0)]
                    m.next = "PAIR"
            with m.State("PAIR"):
                m.d.comb += self.busy.eq(1)
                with m.If(jr != nsel):
                    m.d.comb += port.r_en.eq(1)
                    with m.If(~ph):
                        m.d.comb += port.r_addr.eq(gptr + jr)
                        m.d.sync += [rd0.eq(1), ph.eq(1)]
                    with m.Else():
                        m.d.comb += port.r_addr.eq(seg_start + idx[jr])
                        m.d.sync += [rd1.eq(1), ph.eq(0), jr.eq(jr + 1),
                                     addr1.eq(seg_start + idx[jr])]
                with m.Else():
                    m.d.sync += [gptr.eq(gptr + nsel), s0.eq(s0 + SEG)]
                    with m.If(s0 + SEG >= c.length):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "SEG"
            with m.State("DRAIN"):
                # the next message may add into a word this one's adds still write
                m.d.comb += self.busy.eq(1)
                with m.If((inflight == 0) & ~Cat(*rd1_chain).any()):
                    m.d.sync += [q.eq(q + 1), s0.eq(0)]
                    with m.If(q + 1 == cfg.ranks):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "SEG"

        # SUM: index words arrive ML cycles after their read; sums are written as they come
        with m.If(idx_data):
            with m.Switch(idx_e_data):
                for w in range(IW_MAX):
                    with m.Case(w):
                        for p in range(PW):
                            j = w * PW + p
                            if j < K:
                                m.d.sync += idx[j].eq(port.r_data[p * IB:(p + 1) * IB])
        with m.If(is_sum & add_ov):
            m.d.comb += [port.w_en.eq(1), port.w_addr.eq(wa), port.w_data.eq(add_out)]
        return m
