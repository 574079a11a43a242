"""The collective engine of one core: ring all-reduce of an FP32 vector, and point-to-point
send / receive (docs/multicore.md).

The engine holds no memory: it reaches the vector through one
:class:`~hdl.lib.memport.WordPort` (``mem``), so it can later be a client of the training core's
scratchpad crossbar, and talks to its ring neighbours through two streams: ``tx`` to rank
``r + 1`` and ``rx`` from rank ``r - 1`` (mod ``N``).

One ``ALLREDUCE`` command reduces ``mem[base : base + length]`` over the ring. The vector is cut
into ``N`` segments of ``seg`` words (segment ``k`` is ``[k*seg, min((k+1)*seg, length))``,
possibly empty). Step ``t = 0 .. 2N - 3`` sends segment ``(r - t) mod N`` and receives segment
``(r - t - 1) mod N``:

* reduce-scatter (``t < N - 1``): every received word is added to the local word,
  ``mem = rx + mem`` (FP32Add, the received partial sum as the left operand), so segment ``k``
  ends up on rank ``k - 1`` as ``((x_k + x_{k+1}) + x_{k+2}) + ... + x_{k-1}``: the ranks'
  contributions are summed left to right starting at rank ``k`` (ranks mod ``N``);
* all-gather (``t >= N - 1``): every received word overwrites the local word.

With ``comp = CollComp.BFP`` the words cross the links as BFP groups (the link codecs of
:mod:`hdl.multi.codec`, driven by ``mode``), so what a rank receives is the decoded group,
rounded as the command's ``rounding`` says (stochastic rounding draws each group's noise from
the sending rank's converter LFSR, which steps for every group that converter ever made).
Groups never straddle a segment: a segment whose length is not a multiple of the group size
``G`` is sent with ``+0`` words after its last word up to a whole group (the engine makes
them, reading no memory), and the receiver drops the words past the segment's end (the
padding decodes to zeros, or to NaNs in a NaN group; either way it is never written), so
``length`` and ``seg`` are free. One more step comes between the reduce-scatter and the
all-gather, a local one (step ``N - 1``; the all-gather's steps are then ``N .. 2N - 2``): each
rank sends its reduced segment ``(r + 1) mod N`` through its own codecs, looped back
(``loop``, see :class:`~hdl.multi.endpoint.LinkEndpoint`), and writes what they decode; no
link carries the step. The all-gather then sends that quantized segment, which every codec
relays exactly (a decoded group quantizes to itself in every rounding mode), so all ranks end
with the owner's one quantization bit for bit, stochastic rounding included.

A step ends when its segment is sent and every received word is written; the next step then
starts (it sends what the last one wrote). The response reports ``OK``; or ``TIMEOUT`` when for
``timeout`` consecutive cycles no beat moved on ``tx`` or ``rx`` and no word was written, or
the transmit codec did not empty within ``timeout`` cycles before the local step (the
run is aborted, the vector is left partly reduced, and words still in flight on the links must
be cleared by resetting the ring before the next collective); or ``BAD_*`` for an invalid
command, which changes nothing.

One ``SENDRECV`` command (pipeline parallelism: a stage sends its activation to the next
stage, and on a 2-ring that stage sends the gradient back) sends ``mem[base : base + length]``
as FP32 words on ``tx`` (to rank ``r + 1``) and, at the same time, receives ``rlength`` words
from ``rx`` (from rank ``r - 1``) and writes them to ``mem[rbase : rbase + rlength]`` in order;
so two neighbours exchanging in both directions with one command each cannot deadlock. It is
a bit copy (no adds, NaN payloads kept) and one step (``step`` 0, like one all-gather step):
the same read-ahead, writes, states and ``timeout`` as a ring step, with the command's two
regions in place of the segments; ``seg`` is ignored and there is no local step. It ends when
all ``length`` words were sent and all ``rlength`` written (``OK``, ``flags`` 0), or answers
``TIMEOUT`` as above (e.g. a receive whose sender never sends). Each rank's ``length`` must
equal the ``rlength`` of rank ``r + 1`` (else the receiver times out, or the extra words wait
on the link and are taken by the next command). With ``config.reverse`` the engine also has
reverse links: ``sdir = 1`` sends on ``tx_rev`` (to rank ``r - 1``) instead of ``tx``, and
``rdir = 1`` receives from ``rx_rev`` (from rank ``r + 1``) instead of ``rx``; each pair's
other stream stays idle, and the pairing rule holds per direction. Invalid, changing nothing:
``BAD_COMP`` when ``comp`` is not ``CollComp.NONE`` (FP32 words only; ``mode`` is set to
``comp = NONE`` once the transmit codec is idle, as for any command); ``BAD_DIR`` when
``sdir`` or ``rdir`` is 1 on an engine without reverse links; ``BAD_LEN`` when ``length == rlength == 0``, when
``base + length > depth`` or ``rbase + rlength > depth``, or when both regions are non-empty
and overlap (regions that only touch are accepted); ``BAD_TIMEOUT`` when ``timeout == 0``;
never ``BAD_SEG``.

An ``ALLREDUCE`` with ``comp = CollComp.TOPK`` (an engine built with ``CollectiveConfig.topk``;
else ``BAD_COMP``) is top-k sparsification with error feedback: the local ``COMPRESS`` pass of
:class:`~hdl.multi.topk.TopKPass` (gradient ``mem[base : +length]`` plus the residual at
``rbase``; the residual updated, the gradient zeroed, this rank's message written to
``gbase + r * M``, ``M = TopK.message_words(length)``), then ``N - 1`` all-gather steps of the
ring over the buffer (segment ``q`` is rank ``q``'s message; the same states and ``timeout``),
then the local ``SUM`` pass (every message added into the gradient region in rank order). The
pass owns the memory port while it runs. ``BAD_LEN`` for ``length == 0``, a region past
``depth`` or any two of the three regions overlapping; ``seg``, ``width`` and ``rlength`` are
unused; never ``BAD_SEG`` (docs/multicore.md, *Top-k compression*).

Golden model: :mod:`sim.model.collective` (:func:`sim.model.compress.topk_ring` for top-k).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from ..lib.blockfifo import BufferedFIFO
from amaranth.lib.wiring import In, Out

from ..bfp.converter import Rounding, width_shape
from ..formats import BFPFlags
from ..fp32.add import FP32Add
from ..fp32.config import FP32Config
from ..lib.dataflow import operands
from ..lib.memport import WordPort
from ..lib.mustuse import mark_used
from ..lib.streamreg import StreamRegister
from .codec import mode_layout
from .config import CollComp, CollectiveConfig, CollOp, CollStatus
from .topk import TopKOp, TopKPass, message_words

__all__ = ["CollectiveEngine", "cmd_layout", "rsp_layout"]

#: Width of the response's cycle count (saturates).
CYCLE_BITS = 32


def cmd_layout(config: CollectiveConfig) -> data.StructLayout:
    """``op`` (:class:`~hdl.multi.config.CollOp`), ``base``, ``length``, ``seg`` (words per
    segment), ``timeout`` (cycles without progress before ``TIMEOUT``), ``comp``
    (:class:`~hdl.multi.config.CollComp`), ``width`` (BFP mantissa width), ``rounding``
    (BFP: the transmit converters' :class:`~hdl.bfp.converter.Rounding`, code 3
    ``BAD_COMP``; unused without BFP), and for
    ``SENDRECV`` the receive region ``rbase``, ``rlength`` (``seg`` unused); a top-k
    ``ALLREDUCE`` (``comp = CollComp.TOPK``) reads the residual at ``rbase`` (``length``
    words) and gathers the messages at ``gbase`` (``seg``, ``width`` and ``rlength``
    unused)."""
    return data.StructLayout({"op": 2, "base": config.addr_bits, "length": config.len_bits,
                              "seg": config.len_bits, "timeout": config.timeout_bits,
                              "comp": 2, "width": width_shape(config.bfp),
                              "rounding": Rounding,
                              "rbase": config.addr_bits, "rlength": config.len_bits,
                              "gbase": config.addr_bits, "sdir": 1, "rdir": 1})


def rsp_layout(config: CollectiveConfig) -> data.StructLayout:
    """``status`` (:class:`~hdl.multi.config.CollStatus`), ``step`` (the ring step running at
    a ``TIMEOUT``, else 0), ``cycles`` (cycles from acceptance to the response, saturating;
    0 for a ``BAD_*``), ``flags`` (the transmit codec's: a BFP group with a NaN / an infinity
    was sent, as a NaN group, during this command)."""
    return data.StructLayout({"status": 3, "step": 5, "cycles": CYCLE_BITS, "flags": BFPFlags})


class CollectiveEngine(wiring.Component):
    """Ring all-reduce and point-to-point (``SENDRECV``) engine of one rank.

    Parameters
    ----------
    config : CollectiveConfig
    fp32_config : FP32Config
        The adder's pipeline (:class:`~hdl.fp32.add.FP32Add`): the reduce-scatter's sums, and
        with ``config.topk`` also the :class:`~hdl.multi.topk.TopKPass` sums (lent through its
        ``unit_add0``).

    Members
    -------
    mem : Out(WordPort(addr_bits=config.addr_bits))
        The vector's memory (one-cycle read latency, :mod:`hdl.lib.memport`). Transmit reads
        and reduce-scatter reads share the read port, alternating when both want it.
    tx : Out(stream.Signature(32))
        FP32 words to rank ``r + 1``.
    rx : In(stream.Signature(32))
        FP32 words from rank ``r - 1``. ``rx.ready`` does not depend on ``rx.valid``.
    cmd : In(stream.Signature(cmd_layout(config)))
        Accepted only while idle.
    rsp : Out(stream.Signature(rsp_layout(config)))
        One response per command.
    rank : In(range(config.ranks))
        This engine's rank ``r``; hold it constant (a multi-core top ties it).
    busy : Out(1)
        A command is executing (the memory port is in use); not while an accepted command
        waits for the transmit codec (``codec_idle``).
    mode : Out(mode_layout(config.bfp))
        The running command's ``comp``, ``width`` and ``rounding``, for the link codecs
        (:mod:`hdl.multi.codec`); held until the next command is accepted.
    codec_flags : In(BFPFlags)
        The transmit codec's sticky flags, reported in ``rsp.flags``.
    codec_clear : Out(1)
        Pulses when a command is accepted (clears ``codec_flags``).
    loop : Out(1)
        The local step of a BFP command runs (state ``FLUSH`` sets it once ``codec_idle``;
        cleared when the step or the command ends): the codecs loop this rank's flits back to
        itself.
    codec_idle : In(1)
        The transmit codec holds no word. An accepted valid command waits for it before it
        changes ``mode`` and starts (the last groups of the previous command leave in their
        own mode), and answers ``TIMEOUT`` (step 0) if it has not come within ``timeout``
        cycles. Tie it to 1 without codecs.
    tx_rev : Out(stream.Signature(32)), only with ``config.reverse``
        FP32 words to rank ``r - 1`` (a ``SENDRECV`` with ``sdir = 1``; no codec: FP32 only).
    rx_rev : In(stream.Signature(32)), only with ``config.reverse``
        FP32 words from rank ``r + 1`` (a ``SENDRECV`` with ``rdir = 1``). ``rx_rev.ready``
        does not depend on ``rx_rev.valid``.
    """

    def __init__(self, *, config: CollectiveConfig | None = None,
                 fp32_config: FP32Config | None = None):
        self.config = config or CollectiveConfig()
        if not isinstance(self.config, CollectiveConfig):
            mark_used(self)
            raise TypeError(f"config must be a CollectiveConfig, not "
                            f"{type(self.config).__name__}")
        self.fp32_config = fp32_config or FP32Config()
        if not isinstance(self.fp32_config, FP32Config):
            mark_used(self)
            raise TypeError(f"fp32_config must be an FP32Config, not "
                            f"{type(self.fp32_config).__name__}")
        super().__init__({
            "mem": Out(WordPort(addr_bits=self.config.addr_bits)),
            "tx": Out(stream.Signature(32)),
            "rx": In(stream.Signature(32)),
            "cmd": In(stream.Signature(cmd_layout(self.config))),
            "rsp": Out(stream.Signature(rsp_layout(self.config))),
            "rank": In(range(self.config.ranks)),
            "busy": Out(1),
            "mode": Out(mode_layout(self.config.bfp)),
            "codec_flags": In(BFPFlags),
            "codec_clear": Out(1),
            "codec_idle": In(1),
            "loop": Out(1),
            **({"tx_rev": Out(stream.Signature(32)), "rx_rev": In(stream.Signature(32))}
               if self.config.reverse else {}),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        N, ab, lb = cfg.ranks, cfg.addr_bits, cfg.len_bits
        port = self.mem

        # the command stream: ``cmd`` itself, or behind a register stage (``cmd_reg``)
        if cfg.cmd_reg:
            m.submodules.cmd_reg = creg = StreamRegister(cmd_layout(cfg))
            wiring.connect(m, wiring.flipped(self.cmd), creg.i)
            cmd_s = creg.o
        else:
            cmd_s = self.cmd
        m.submodules.add = add = FP32Add(config=self.fp32_config)
        m.submodules.txq = txq = BufferedFIFO(width=32, depth=cfg.tx_fifo_depth)
        TK = cfg.topk
        if TK is not None:
            # the pass borrows the adder: a top-k all-reduce has no reduce-scatter add, and
            # the pass runs only between the engine's streaming steps
            m.submodules.topk = tkp = TopKPass(config=cfg, fp32_config=self.fp32_config,
                                               units=("add",))

        # ---- command registers -------------------------------------------------------------
        base = Signal(ab, name="base")
        length = Signal(lb, name="length")
        seg = Signal(lb, name="seg")
        rbase = Signal(ab, name="rbase")                   # SENDRECV: receive region
        rlength = Signal(lb, name="rlength")
        p2p = Signal(name="p2p")                           # the command is a SENDRECV
        sdir = Signal(name="sdir")                         # SENDRECV: send to r - 1
        rdir = Signal(name="rdir")                         # SENDRECV: receive from r + 1
        timeout = Signal(cfg.timeout_bits, name="timeout")
        tk_on = Signal(name="tk_on")                       # a top-k all-reduce
        tk_base = Signal(ab, name="tk_base")               # its gradient, residual, buffer
        tk_len = Signal(lb, name="tk_len")
        tk_rbase = Signal(ab, name="tk_rbase")
        tk_gbase = Signal(ab, name="tk_gbase")
        tk_m = Signal(lb, name="tk_m")                     # words per message
        step = Signal(range(cfg.steps(CollComp.BFP) + 1), name="step")
        last_step = Signal(range(cfg.steps(CollComp.BFP)), name="last_step")
        new_mode = Signal(mode_layout(cfg.bfp), name="new_mode")
        send_idx = Signal(range(N), name="send_idx")       # (r - t) mod N
        recv_idx = Signal(range(N), name="recv_idx")       # (r - t - 1) mod N
        reduce = Signal(name="reduce")                     # reduce-scatter phase
        cycles = Signal(CYCLE_BITS, name="cycles")
        idle_cnt = Signal(cfg.timeout_bits, name="idle_cnt")

        # per-step segment geometry; with BFP a segment crosses the link padded with +0 to
        # whole groups (``*_plen``), and only its ``*_len`` words are read and written
        send_base = Signal(ab, name="send_base")
        send_len = Signal(lb, name="send_len")
        recv_base = Signal(ab, name="recv_base")
        recv_len = Signal(lb, name="recv_len")
        send_plen = Signal(lb + 1, name="send_plen")
        recv_plen = Signal(lb + 1, name="recv_plen")
        G = cfg.bfp.group_size

        def padded(n):
            """``n`` rounded up to whole groups while the codecs run BFP, else ``n``."""
            up = Signal(lb + 1, name=f"{n.name}_up")
            gb = G.bit_length() - 1                  # G is a power of two
            m.d.comb += up.eq(Cat(Const(0, gb), (n + (G - 1))[gb:]) if gb else n)
            return Mux(self.mode.comp, up, n)

        def geometry(idx, start_sig, len_sig, plen_sig):
            start = Signal(lb + (N - 1).bit_length(), name=f"{start_sig.name}_off")
            rest = Signal(lb + 1, name=f"{len_sig.name}_rest")
            n = Signal(lb, name=f"{len_sig.name}_next")
            m.d.comb += [start.eq(seg * idx), rest.eq(length - start),
                         n.eq(Mux(start >= length, 0, Mux(rest < seg, rest, seg)))]
            return [start_sig.eq(base + start), len_sig.eq(n), plen_sig.eq(padded(n))]

        def dec(idx):
            return Mux(idx == 0, N - 1, idx - 1)

        # ---- per-step counters -------------------------------------------------------------
        tx_issued = Signal(lb + 1, name="tx_issued")    # reads (or padding words) issued for tx
        tx_sent = Signal(lb + 1, name="tx_sent")        # tx beats
        tx_occ = Signal(range(cfg.tx_fifo_depth + 1), name="tx_occ")   # issued, not yet sent
        rx_got = Signal(lb + 1, name="rx_got")          # rx beats accepted
        rx_done = Signal(lb, name="rx_done")        # received words written

        running = Signal(name="running")
        # the streams of this command: forward (tx to r + 1, rx from r - 1), or with
        # ``sdir`` / ``rdir`` the reverse links; the other stream of each pair is held idle
        tx_valid = Signal(name="tx_valid")
        tx_ready = Signal(name="tx_ready")
        rx_valid = Signal(name="rx_valid")
        rx_ready = Signal(name="rx_ready")
        rx_payload = Signal(32, name="rx_payload")
        if cfg.reverse:
            m.d.comb += [self.tx.valid.eq(tx_valid & ~sdir),
                         self.tx_rev.valid.eq(tx_valid & sdir),
                         tx_ready.eq(Mux(sdir, self.tx_rev.ready, self.tx.ready)),
                         self.rx.ready.eq(rx_ready & ~rdir),
                         self.rx_rev.ready.eq(rx_ready & rdir),
                         rx_valid.eq(Mux(rdir, self.rx_rev.valid, self.rx.valid)),
                         rx_payload.eq(Mux(rdir, self.rx_rev.payload, self.rx.payload))]
        else:
            m.d.comb += [self.tx.valid.eq(tx_valid), tx_ready.eq(self.tx.ready),
                         self.rx.ready.eq(rx_ready), rx_valid.eq(self.rx.valid),
                         rx_payload.eq(self.rx.payload)]
        tx_fire = Signal(name="tx_fire")
        rx_fire = Signal(name="rx_fire")
        m.d.comb += [tx_fire.eq(tx_valid & tx_ready), rx_fire.eq(rx_valid & rx_ready)]

        # ---- read-port arbitration: tx read-ahead vs reduce-scatter reads ------------------
        prio_rx = Signal(name="prio_rx")            # alternates every cycle
        m.d.sync += prio_rx.eq(~prio_rx)
        tx_req = Signal(name="tx_req")
        m.d.comb += tx_req.eq(running & (tx_issued != send_plen)
                              & (tx_occ != cfg.tx_fifo_depth))
        rx_room = Signal(name="rx_room")
        m.d.comb += rx_room.eq(running & (rx_got != recv_plen))
        m.d.comb += rx_ready.eq(rx_room & (~reduce | ~tx_req | prio_rx))
        tx_pad = Signal(name="tx_pad")              # the word issued is padding (+0)
        m.d.comb += tx_pad.eq(tx_issued >= send_len)
        rx_real = Signal(name="rx_real")            # the word received is not padding
        m.d.comb += rx_real.eq(rx_got < recv_len)
        # what a received word does with the memory port: a reduce-scatter read of the local
        # word (``loc_read``) or an all-gather write (``loc_write``), at ``loc_addr`` with the
        # word ``loc_word``; in the cycle it is received, or (``rx_reg``) the cycle after,
        # from registers, so the link's handshake does not reach the port's address
        loc_read, loc_write = Signal(name="loc_read"), Signal(name="loc_write")
        loc_addr, loc_word = Signal(ab, name="loc_addr"), Signal(32, name="loc_word")
        m.d["sync" if cfg.rx_reg else "comb"] += [
            loc_read.eq(rx_fire & reduce & rx_real), loc_write.eq(rx_fire & ~reduce & rx_real),
            loc_addr.eq(recv_base + rx_got), loc_word.eq(rx_payload)]
        tx_read = Signal(name="tx_read")            # the local read has the port first
        m.d.comb += tx_read.eq(tx_req & ~(loc_read if cfg.rx_reg else rx_fire & reduce))

        m.d.comb += [
            port.r_en.eq((tx_read & ~tx_pad) | loc_read),
            port.r_addr.eq(Mux(loc_read, loc_addr, send_base + tx_issued)),
        ]

        # tx: read data mem_latency cycles later into the FIFO (an abort clears the reads in
        # flight, so a command started right after it takes none of them)
        tx_rd_pending, tx_pad_pending = tx_read, tx_pad
        tx_in_flight = []                           # the reads in flight, one per cycle
        for k in range(cfg.mem_latency):
            nr, np_ = Signal(name=f"tx_rd_pending{k}"), Signal(name=f"tx_pad_pending{k}")
            m.d.sync += [nr.eq(tx_rd_pending & (running if k else 1)), np_.eq(tx_pad_pending)]
            tx_rd_pending, tx_pad_pending = nr, np_
            tx_in_flight.append(nr)
        m.d.comb += [txq.w_en.eq(tx_rd_pending & running),
                     txq.w_data.eq(Mux(tx_pad_pending, 0, port.r_data)),
                     tx_valid.eq(txq.r_rdy & running), self.tx.payload.eq(txq.r_data),
                     # while idle the FIFO is emptied (left over from an aborted run)
                     txq.r_en.eq(Mux(running, tx_ready, 1))]
        if cfg.reverse:
            m.d.comb += self.tx_rev.payload.eq(txq.r_data)
        m.d.sync += tx_occ.eq(tx_occ + tx_read - tx_fire)

        # rx (reduce-scatter): received word and local word -> adder -> write back
        # (the received word and its address wait beside the read for mem_latency cycles)
        add_v, add_rx, add_addr = loc_read, loc_word, loc_addr
        for k in range(cfg.mem_latency):
            nv, nx, na = (Signal(name=f"add_v{k}"), Signal(32, name=f"add_rx{k}"),
                          Signal(ab, name=f"add_addr{k}"))
            m.d.sync += [nv.eq(add_v & (running if k else 1)), nx.eq(add_rx), na.eq(add_addr)]
            add_v, add_rx, add_addr = nv, nx, na
        m.d.comb += [add.i.valid.eq(add_v), add.i.payload.a.eq(add_rx),
                     add.i.payload.b.eq(port.r_data), add.i.payload.sub.eq(0),
                     add.o.ready.eq(1)]
        if TK is not None:
            tk_add = tkp.unit_add0
            m.d.comb += tk_add.result.eq(add.o.payload)
            with m.If(tk_add.valid):
                m.d.comb += [add.i.valid.eq(1), operands(add.i.payload).eq(tk_add.ops)]
        # the adder never stalls (o.ready = 1): its latency is fixed, so the address and a
        # valid bit that an abort can clear travel beside it
        wv, wa = add_v, add_addr
        for k in range(add.latency):
            nv, na = Signal(name=f"wb_v{k}"), Signal(ab, name=f"wb_addr{k}")
            m.d.sync += [nv.eq(wv & running), na.eq(wa)]
            wv, wa = nv, na
        add_write = Signal(name="add_write")
        m.d.comb += add_write.eq(wv & running)
        ag_write = loc_write
        m.d.comb += [
            port.w_en.eq(add_write | ag_write),
            port.w_addr.eq(Mux(add_write, wa, loc_addr)),
            port.w_data.eq(Mux(add_write, add.o.payload, loc_word)),
        ]

        m.d.sync += [tx_issued.eq(tx_issued + tx_read), tx_sent.eq(tx_sent + tx_fire),
                     rx_got.eq(rx_got + rx_fire),
                     rx_done.eq(rx_done + (add_write | ag_write))]

        # ---- control -----------------------------------------------------------------------
        cmd = cmd_s.payload
        rsp = self.rsp.payload
        progress = Signal(name="progress")
        m.d.comb += progress.eq(tx_fire | rx_fire | port.w_en)
        with m.If(self.busy):
            m.d.sync += cycles.eq(Mux(cycles == (1 << CYCLE_BITS) - 1, cycles, cycles + 1))
        with m.If(running):
            m.d.sync += idle_cnt.eq(Mux(progress, 0, idle_cnt + 1))

        # ---- command checks --------------------------------------------------------------
        # With cmd_reg they take two register stages from the held command (stage 1: the
        # regions' ends, the message words, seg * N; stage 2: the verdicts), and a command
        # is taken only after it has been held that long (``settle``): two cycles more each.
        ST = 2 if cfg.cmd_reg else 0

        def staged(value, name):
            """``value`` behind a register when the checks are staged, else itself."""
            if not ST:
                return value
            reg = Signal.like(value, name=f"{name}_q")
            m.d.sync += reg.eq(value)
            return reg

        # stage 1
        end = Signal(lb + 1, name="cmd_end")
        m.d.comb += end.eq(cmd.base + cmd.length)
        rend = Signal(lb + 1, name="cmd_rend")              # SENDRECV: the receive region
        m.d.comb += rend.eq(cmd.rbase + cmd.rlength)
        seg_n = Signal(lb + (N - 1).bit_length() + 1, name="cmd_seg_n")
        m.d.comb += seg_n.eq(cmd.seg * N)
        msg_words = Signal(lb + 6, name="cmd_msg_words")    # top-k: message words M
        rlen_end = Signal(lb + 1, name="cmd_tk_rend")
        if TK is not None:
            m.d.comb += [msg_words.eq(message_words(m, cmd.length, TK, name="cmd_tk_m")),
                         rlen_end.eq(cmd.rbase + cmd.length)]
        end, rend, seg_n, msg_words, rlen_end = (
            staged(v, v.name) for v in (end, rend, seg_n, msg_words, rlen_end))

        # stage 2
        is_p2p = Signal(name="cmd_p2p")
        m.d.comb += is_p2p.eq(cmd.op == CollOp.SENDRECV)
        overlap = Signal(name="cmd_overlap")
        m.d.comb += overlap.eq((cmd.length != 0) & (cmd.rlength != 0)
                               & (cmd.base < rend) & (cmd.rbase < end))
        p2p_bad_len = Signal(name="cmd_p2p_bad_len")
        m.d.comb += p2p_bad_len.eq(((cmd.length == 0) & (cmd.rlength == 0)) | (end > cfg.depth)
                                   | (rend > cfg.depth) | overlap)
        bfp = Signal(name="cmd_bfp")
        m.d.comb += bfp.eq(cmd.comp == CollComp.BFP)
        width_ok = Signal(name="cmd_width_ok")
        m.d.comb += width_ok.eq(0)
        with m.Switch(cmd.width):
            with m.Case(*cfg.bfp.widths):
                m.d.comb += width_ok.eq(1)
        # top-k: the checks of its 3 regions (the message buffer holds N messages)
        is_topk = Signal(name="cmd_topk")
        m.d.comb += is_topk.eq(~is_p2p & (cmd.comp == CollComp.TOPK))
        n_msg = Signal(lb + 11, name="cmd_n_msg")
        gend = Signal(lb + 11, name="cmd_gend")
        tk_bad_len = Signal(name="cmd_tk_bad_len")
        if TK is not None:
            m.d.comb += [n_msg.eq(N * msg_words), gend.eq(cmd.gbase + n_msg)]

            def apart(b1, e1, b2, e2):      # [b1, e1) and [b2, e2) share no word
                return (e1 <= b2) | (e2 <= b1)

            m.d.comb += tk_bad_len.eq(
                (cmd.length == 0) | (end > cfg.depth) | (rlen_end > cfg.depth)
                | (gend > cfg.depth) | ~apart(cmd.base, end, cmd.rbase, rlen_end)
                | ~apart(cmd.base, end, cmd.gbase, gend)
                | ~apart(cmd.rbase, rlen_end, cmd.gbase, gend))
        # SENDRECV over the reverse links: only an engine that has them
        bad_dir = Signal(name="cmd_bad_dir")
        m.d.comb += bad_dir.eq(is_p2p & (cmd.sdir | cmd.rdir) & (0 if cfg.reverse else 1))
        bad_comp = Signal(name="cmd_bad_comp")
        m.d.comb += bad_comp.eq((cmd.comp == 3) | (bfp & ~width_ok)
                                | (bfp & (cmd.rounding.as_value() == 3))
                                | (is_p2p & (cmd.comp != CollComp.NONE))
                                | (is_topk if TK is None else 0))
        bad_op = Signal(name="cmd_bad_op")
        m.d.comb += bad_op.eq((cmd.op != CollOp.ALLREDUCE) & ~is_p2p)
        bad_len = Signal(name="cmd_bad_len")
        m.d.comb += bad_len.eq(Mux(is_p2p, p2p_bad_len,
                                   Mux(is_topk, tk_bad_len,
                                       (cmd.length == 0) | (end > cfg.depth))))
        bad_seg = Signal(name="cmd_bad_seg")
        m.d.comb += bad_seg.eq(~is_p2p & ~is_topk & ((cmd.seg == 0) | (seg_n < cmd.length)))
        (is_p2p, bfp, is_topk, n_msg, bad_dir, bad_comp, bad_op, bad_len, bad_seg) = (
            staged(v, v.name) for v in (is_p2p, bfp, is_topk, n_msg, bad_dir, bad_comp, bad_op,
                                        bad_len, bad_seg))
        settle = Signal(range(ST + 1), name="cmd_settle")   # cycles the command was held
        if ST:
            with m.If(cmd_s.valid & ~cmd_s.ready):
                m.d.sync += settle.eq(Mux(settle == ST, ST, settle + 1))
            with m.Else():
                m.d.sync += settle.eq(0)
        drained = Signal(name="drained")
        m.d.comb += drained.eq(~txq.r_rdy & (tx_occ == 0) & ~Cat(*tx_in_flight).any())

        with m.FSM(name="ctrl"):
            with m.State("IDLE"):
                m.d.comb += cmd_s.ready.eq(drained & (settle == ST))
                with m.If(cmd_s.valid & cmd_s.ready):
                    m.d.sync += [base.eq(cmd.base), length.eq(cmd.length), seg.eq(cmd.seg),
                                 rbase.eq(cmd.rbase), rlength.eq(cmd.rlength), p2p.eq(is_p2p),
                                 sdir.eq(is_p2p & cmd.sdir), rdir.eq(is_p2p & cmd.rdir),
                                 timeout.eq(cmd.timeout), cycles.eq(0), rsp.step.eq(0),
                                 rsp.cycles.eq(0), rsp.flags.eq(0)]
                    with m.If(bad_op):
                        m.d.sync += rsp.status.eq(CollStatus.BAD_OP)
                        m.next = "RESP"
                    # SENDRECV: FP32 words only (comp = NONE), whatever the width
                    with m.Elif(bad_comp):
                        m.d.sync += rsp.status.eq(CollStatus.BAD_COMP)
                        m.next = "RESP"
                    with m.Elif(bad_dir):
                        m.d.sync += rsp.status.eq(CollStatus.BAD_DIR)
                        m.next = "RESP"
                    with m.Elif(bad_len):
                        m.d.sync += rsp.status.eq(CollStatus.BAD_LEN)
                        m.next = "RESP"
                    with m.Elif(bad_seg):
                        m.d.sync += rsp.status.eq(CollStatus.BAD_SEG)
                        m.next = "RESP"
                    with m.Elif(cmd.timeout == 0):
                        m.d.sync += rsp.status.eq(CollStatus.BAD_TIMEOUT)
                        m.next = "RESP"
                    with m.Else():
                        # SENDRECV: one all-gather-like step (no adds), step 0 the last
                        # top-k: N - 1 all-gather steps of the messages (segment q: rank
                        # q's message), between the COMPRESS and SUM passes
                        m.d.sync += [step.eq(0), send_idx.eq(self.rank),
                                     recv_idx.eq(dec(self.rank)), reduce.eq(~is_p2p & ~is_topk),
                                     rsp.status.eq(CollStatus.OK), idle_cnt.eq(0),
                                     new_mode.comp.eq(bfp), new_mode.width.eq(cmd.width),
                                     new_mode.rounding.eq(Mux(bfp, cmd.rounding,
                                                              Rounding.NEAREST)),
                                     last_step.eq(Mux(is_p2p, 0,
                                                      Mux(bfp, cfg.steps(CollComp.BFP) - 1,
                                                          Mux(is_topk, N - 2,
                                                              cfg.steps() - 1)))),
                                     tk_on.eq(is_topk), tk_base.eq(cmd.base),
                                     tk_len.eq(cmd.length), tk_rbase.eq(cmd.rbase),
                                     tk_gbase.eq(cmd.gbase), tk_m.eq(msg_words)]
                        with m.If(is_topk):
                            m.d.sync += [base.eq(cmd.gbase), length.eq(n_msg),
                                         seg.eq(msg_words)]
                        m.next = "CODEC"
            with m.State("CODEC"):
                # the transmit codec may still send the last groups of the previous command
                # in its mode: change the mode only when it is empty (or give up: TIMEOUT)
                with m.If(self.codec_idle):
                    m.d.comb += self.codec_clear.eq(1)
                    m.d.sync += self.mode.eq(new_mode)
                    m.next = "SETUP"
                    if TK is not None:
                        with m.If(tk_on):
                            m.next = "TK_COMP"
                with m.Elif(idle_cnt >= timeout):
                    m.d.sync += [rsp.status.eq(CollStatus.TIMEOUT), rsp.step.eq(0),
                                 rsp.cycles.eq(cycles)]
                    m.next = "RESP"
                with m.Else():
                    m.d.sync += [idle_cnt.eq(idle_cnt + 1), cycles.eq(cycles + 1)]
            with m.State("FLUSH"):
                # the last flits of step N - 2 leave for the link before the loop closes
                m.d.comb += self.busy.eq(1)
                with m.If(self.codec_idle):
                    m.d.sync += self.loop.eq(1)
                    m.next = "SETUP"
                with m.Elif(idle_cnt >= timeout):
                    m.d.sync += [rsp.status.eq(CollStatus.TIMEOUT), rsp.step.eq(step),
                                 rsp.cycles.eq(cycles), rsp.flags.eq(self.codec_flags)]
                    m.next = "RESP"
                with m.Else():
                    m.d.sync += idle_cnt.eq(idle_cnt + 1)
            with m.State("SETUP"):
                m.d.comb += self.busy.eq(1)
                geo = (geometry(send_idx, send_base, send_len, send_plen)
                       + geometry(recv_idx, recv_base, recv_len, recv_plen))
                with m.If(p2p):
                    # SENDRECV: the command's two regions instead of segments (FP32: no
                    # padding)
                    m.d.sync += [send_base.eq(base), send_len.eq(length), send_plen.eq(length),
                                 recv_base.eq(rbase), recv_len.eq(rlength),
                                 recv_plen.eq(rlength)]
                with m.Else():
                    m.d.sync += geo
                m.d.sync += [tx_issued.eq(0), tx_sent.eq(0), rx_got.eq(0), rx_done.eq(0),
                             tx_occ.eq(0), idle_cnt.eq(0), running.eq(1)]
                m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                with m.If((tx_sent == send_plen) & (rx_got == recv_plen) & (rx_done == recv_len)
                          & running):
                    m.d.sync += [running.eq(0), step.eq(step + 1), send_idx.eq(dec(send_idx)),
                                 recv_idx.eq(dec(recv_idx)),
                                 reduce.eq((step + 1 < cfg.ranks - 1) & ~tk_on)]
                    with m.If((step == last_step) & (tk_on if TK is not None else 0)):
                        m.next = "TK_SUM" if TK is not None else "RESP"
                    with m.Elif(step == last_step):
                        m.d.sync += [rsp.cycles.eq(cycles), rsp.flags.eq(self.codec_flags),
                                     self.loop.eq(0)]
                        m.next = "RESP"
                    with m.Elif(self.mode.comp & (step + 2 == cfg.ranks)):
                        # reduce-scatter done: the local step sends and receives the own
                        # segment (r + 1) mod N (= the decremented send_idx)
                        m.d.sync += [recv_idx.eq(dec(send_idx)), idle_cnt.eq(0)]
                        m.next = "FLUSH"
                    with m.Elif(self.mode.comp & (step + 1 == cfg.ranks)):
                        # the local step done: the all-gather starts by sending the own
                        # segment, now quantized, and receives segment r
                        m.d.sync += [send_idx.eq(send_idx), self.loop.eq(0)]
                        m.next = "SETUP"
                    with m.Else():
                        m.next = "SETUP"
                with m.Elif(running & (idle_cnt >= timeout)):
                    m.d.sync += [running.eq(0), tx_occ.eq(0), self.loop.eq(0),
                                 rsp.status.eq(CollStatus.TIMEOUT), rsp.step.eq(step),
                                 rsp.cycles.eq(cycles), rsp.flags.eq(self.codec_flags)]
                    m.next = "RESP"
            if TK is not None:
                tc = tkp.cmd.payload
                m.d.comb += [tc.base.eq(tk_base), tc.length.eq(tk_len), tc.rbase.eq(tk_rbase),
                             tc.mlen.eq(tk_m)]
                with m.State("TK_COMP"):
                    # this rank's message goes to its own place q = r of the buffer
                    m.d.comb += [self.busy.eq(1), tkp.cmd.valid.eq(1),
                                 tc.op.eq(TopKOp.COMPRESS),
                                 tc.gbase.eq(tk_gbase + self.rank * tk_m)]
                    with m.If(tkp.cmd.ready):
                        m.next = "TK_COMP_WAIT"
                with m.State("TK_COMP_WAIT"):
                    m.d.comb += self.busy.eq(1)
                    with m.If(~tkp.busy):
                        m.next = "SETUP"
                with m.State("TK_SUM"):
                    m.d.comb += [self.busy.eq(1), tkp.cmd.valid.eq(1), tc.op.eq(TopKOp.SUM),
                                 tc.gbase.eq(tk_gbase)]
                    with m.If(tkp.cmd.ready):
                        m.next = "TK_SUM_WAIT"
                with m.State("TK_SUM_WAIT"):
                    m.d.comb += self.busy.eq(1)
                    with m.If(~tkp.busy):
                        m.d.sync += [rsp.cycles.eq(cycles), rsp.flags.eq(self.codec_flags)]
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += self.rsp.valid.eq(1)
                with m.If(self.rsp.ready):
                    m.next = "IDLE"
        if TK is not None:
            # the local passes own the memory port while they run (the ring is then idle)
            m.d.comb += tkp.mem.r_data.eq(port.r_data)
            with m.If(tkp.busy):
                m.d.comb += [port.r_en.eq(tkp.mem.r_en), port.r_addr.eq(tkp.mem.r_addr),
                             port.w_en.eq(tkp.mem.w_en), port.w_addr.eq(tkp.mem.w_addr),
                             port.w_data.eq(tkp.mem.w_data)]
        return m
