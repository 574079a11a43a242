"""The training core's vector unit: ``VEC``, ``REDUCE`` and ``SOFTMAX_XENT`` over the shared
FP32 scratchpad (docs/vector.md). Golden model: :func:`sim.model.vector.run_vector`
(bit-exact).

The unit reuses the verified stream blocks of :mod:`hdl.grad` -- :class:`Elementwise` and
:class:`BiasGrad` once per *lane* (``L = CoreConfig.vec_lanes``, a divisor of ``S``), one
:class:`LaneSum` (``square=True``) and one :class:`SoftmaxXent` -- between *line readers*
(scratchpad lines -> beats of ``L`` elements, or of one) and *line writers* (beats -> masked
line writes)::

    port a --> reader A --+--> Elementwise x L --+--> writer D --> port d
    port b --> reader B --+     ^ (acc add)      |
    port d --> reader D --------+                |
                          +--> BiasGrad x L -----+
                          +--> LaneSum (x*x) ----+      (one element per cycle)
                          +--> SoftmaxXent ------+--> writer E --> port e (loss)

A reader walks a ``rows x cols`` matrix (element ``(r, c)``: line ``base + r * stride + c //
S``, word ``c % S``) in beats: ``L`` consecutive columns of a row per beat for the elementwise
ops and the bias gradient (the *wide* mode: lane ``j`` of the beat is column ``c + j``), one
element per beat for ``SUMSQ`` and ``SOFTMAX_XENT`` (*narrow*), issuing one line read per beat
and presenting the words one cycle later; under backpressure it simply stops reading (the
port's ``r_data`` holds while ``r_en = 0``). A writer collects a line's beats and writes them
with one masked write when the line's last beat or the row's last beat arrives: padding words
are never written. Writers never stall, so the blocks' outputs are never backpressured. The
lanes of a kind get the same control inputs every cycle, so they run in lockstep (lane 0's
handshakes stand for all); lanes past a row's end compute on whatever the line holds and
their results are dropped by the writer's mask.
"""
from __future__ import annotations

import dataclasses

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..fp32.add import FP32Add
from ..fp32.config import FP32Config
from ..fp32.div import FP32Div
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..fp32.log_config import FP32LogConfig
from ..fp32.mul import FP32Mul
from ..grad.biasgrad import BiasGrad
from ..grad.config import GradConfig
from ..grad.elementwise import EW_ADD, Elementwise
from ..grad.softmax import SoftmaxXent
from ..lib.dataflow import UnitPort, pool_unit
from ..lib.lanesum import LaneSum
from ..lib.memport import LinePort
from ..lib.mustuse import mark_used as _used
from .config import CoreConfig
from .isa import DIM_BITS, VECTOR_CMD, Op, Rop, Vop

__all__ = ["VectorUnit", "rd_layout"]


def rd_layout(L: int) -> data.StructLayout:
    """A beat of a line reader: ``L`` words (``x[0]`` only in narrow mode), end of its row, end
    of the whole walk."""
    return data.StructLayout({"x": data.ArrayLayout(32, L), "eol": 1, "last": 1})


class _LineReader(wiring.Component):
    """``rows x cols`` elements of a line port as a stream of beats, one beat per cycle.

    ``start`` (one cycle, only while the previous walk has been consumed) latches ``base``,
    ``rows``, ``cols``, ``stride`` (lines from one row's first line to the next; 0 repeats one
    row: broadcast), ``zero`` (emit +0 words without reading) and ``narrow``. Element ``(r,
    c)`` is word ``c % S`` of line ``base + r * stride + c // S``.

    A beat is a *group* of ``L`` consecutive elements of a row, columns ``c .. c + L - 1``
    with ``c`` a multiple of ``L`` (``L`` divides ``S``, so a group lies in one line: words
    ``c % S ..``); a row is ``ceil(cols / L)`` beats, the last one partly past the row's end
    (those words are whatever the line holds: the consumer ignores them). With ``narrow`` a
    beat is one element in ``x[0]`` (the other words are don't-care). The line read is issued
    when the beat is taken into the output register, whose words are selected from ``r_data``
    one cycle later; with the output stalled no read is issued, so ``r_data`` holds (LinePort
    contract).

    With ``out_reg`` a two-entry FIFO follows: the selected words leave one cycle later, from
    flip-flops instead of from the block RAM's output through the crossbar, and the reader's
    read enable depends on the FIFO's count, not on the consumer's ``ready``.

    With ``latency = 2`` or 3 (a port whose read data comes that many cycles after ``r_en``:
    the scratchpad's ``registered`` and ``out_registered`` clients; needs ``out_reg``) a read
    is issued while a register of the FIFO's unclaimed entries (``room``, :attr:`room`
    entries) is not zero; the beat's lane and flags follow the read through ``latency``
    stages and its words enter the FIFO when the data is there. Every walk's first beat
    leaves ``latency - 1`` cycles later than with ``latency = 1``, and a beat per cycle after
    it, stalls included.
    """

    def __init__(self, *, line_bits: int, S: int, L: int, out_reg: bool = False,
                 latency: int = 1):
        if latency not in (1, 2, 3) or (latency > 1 and not out_reg):
            raise ValueError(f"_LineReader.latency must be 1, or 2 or 3 with out_reg, not "
                             f"{latency!r}")
        self.S, self.L, self.out_reg, self.latency = S, L, out_reg, latency
        #: FIFO entries with ``latency >= 2``: a beat holds its claim from the cycle after its
        #: read to the cycle it leaves (``latency + 1`` cycles), so ``latency + 2`` let a
        #: read go every cycle.
        self.room = latency + 2
        super().__init__({
            "r_addr": Out(line_bits), "r_en": Out(1), "r_data": In(32 * S),
            "start": In(1), "base": In(line_bits), "rows": In(DIM_BITS), "cols": In(DIM_BITS),
            "stride": In(line_bits), "zero": In(1), "narrow": In(1),
            "o": Out(stream.Signature(rd_layout(L))),
        })

    def elaborate(self, platform):
        m = Module()
        S, L = self.S, self.L
        lgL = (L - 1).bit_length()
        lb = len(self.base)
        active = Signal(name="active")
        row_line = Signal(lb, name="row_line")
        line = Signal(lb, name="line")
        lane = Signal(range(S), name="lane")        # first word of the beat in its line
        r = Signal(DIM_BITS, name="row")
        c = Signal(DIM_BITS, name="col")
        rows = Signal(DIM_BITS, name="rows_q")
        cols = Signal(DIM_BITS, name="cols_q")
        stride = Signal(lb, name="stride_q")
        zero = Signal(name="zero_q")
        narrow = Signal(name="narrow_q")
        ov = Signal(name="o_valid")
        o_lane = Signal(range(S), name="o_lane")
        o_eol = Signal(name="o_eol")
        o_last = Signal(name="o_last")

        adv = Signal(name="advance")
        eol = Signal(name="eol")
        step = Signal(range(L + 1), name="step")
        c_next = Signal(DIM_BITS + 1, name="col_next")
        line_end = Signal(name="line_end")
        # the reader's own output stream (the register stage's input with out_reg)
        o = stream.Signature(rd_layout(L)).create() if self.out_reg else self.o
        if self.latency >= 2:
            # a beat is issued while room is left; its read's data is there latency cycles
            # later
            fifo = m.submodules.out_reg = SyncFIFO(width=rd_layout(L).size, depth=self.room)
            room = Signal(range(self.room + 1), init=self.room, name="room")
            issue = Signal(name="issue")
            m.d.comb += issue.eq(adv & active)
            m.d.sync += room.eq(room - issue + (fifo.r_en & fifo.r_rdy))
        m.d.comb += [adv.eq(~ov | o.ready) if self.latency == 1 else adv.eq(room != 0),
                     step.eq(Mux(narrow, 1, L)), c_next.eq(c + step), eol.eq(c_next >= cols),
                     line_end.eq(lane == Mux(narrow, S - 1, S - L))]
        # The read request comes from registers and the output's ready alone, not from
        # ``start``: ``start`` only comes while the walk is over (``active`` low, so no read
        # either way), and leaving it out keeps the unit's FSM off the path into the crossbar
        # and a bank's address (the S = 4 FPGA build's critical path at c724768).
        m.d.comb += [self.r_en.eq(adv & active & ~zero), self.r_addr.eq(line)]
        with m.If(self.start):
            m.d.sync += [active.eq(1), row_line.eq(self.base), line.eq(self.base), lane.eq(0),
                         r.eq(0), c.eq(0), rows.eq(self.rows), cols.eq(self.cols),
                         stride.eq(self.stride), zero.eq(self.zero),
                         narrow.eq(self.narrow | (L == 1)), ov.eq(0)]
        with m.Elif(adv):
            m.d.sync += ov.eq(active)
            with m.If(active):
                m.d.sync += [o_lane.eq(lane), o_eol.eq(eol), o_last.eq(eol & (r == rows - 1)),
                             c.eq(c_next), lane.eq(lane + step)]
                with m.If(line_end):
                    m.d.sync += [lane.eq(0), line.eq(line + 1)]
                with m.If(eol):
                    m.d.sync += [c.eq(0), lane.eq(0), r.eq(r + 1),
                                 row_line.eq(row_line + stride), line.eq(row_line + stride)]
                    with m.If(r == rows - 1):
                        m.d.sync += active.eq(0)
        if self.latency >= 2:
            # the first stage holds a beat for one cycle only (its data comes anyway)
            with m.If(~self.start & ~adv):
                m.d.sync += ov.eq(0)
            # the later stages: in the last, the beat whose read's data is on r_data now
            stage = (ov, o_lane, o_eol, o_last)
            for k in range(2, self.latency + 1):
                s_v, s_lane = Signal(name=f"s{k}_valid"), Signal(range(S), name=f"s{k}_lane")
                s_eol, s_last = Signal(name=f"s{k}_eol"), Signal(name=f"s{k}_last")
                with m.If(self.start):
                    m.d.sync += s_v.eq(0)
                with m.Else():
                    m.d.sync += [s_v.eq(stage[0]), s_lane.eq(stage[1]), s_eol.eq(stage[2]),
                                 s_last.eq(stage[3])]
                stage = (s_v, s_lane, s_eol, s_last)
            sel_valid, sel_lane, sel_eol, sel_last = stage
        else:
            sel_lane, sel_valid, sel_eol, sel_last = o_lane, ov, o_eol, o_last
        # the group's L words (a constant slice when L == S), or one word in narrow mode
        group = self.r_data.word_select(sel_lane >> lgL, 32 * L) if L < S else self.r_data
        words = [group[32 * j:32 * (j + 1)] for j in range(L)]
        if L > 1:
            words[0] = Mux(narrow, self.r_data.word_select(sel_lane, 32), words[0])
        m.d.comb += [
            o.valid.eq(sel_valid),
            o.payload.eol.eq(sel_eol),
            o.payload.last.eq(sel_last),
        ]
        for j in range(L):
            m.d.comb += o.payload.x[j].eq(Mux(zero, 0, words[j]))
        if self.latency >= 2:
            m.d.comb += [fifo.w_en.eq(o.valid), fifo.w_data.eq(o.payload),
                         self.o.valid.eq(fifo.r_rdy), self.o.payload.eq(fifo.r_data),
                         fifo.r_en.eq(self.o.ready)]
        elif self.out_reg:
            # two entries, so the reader's ready (and with it the bank's read enable) comes
            # from the entry count alone, not from the consumer's ready in the same cycle;
            # a beat still leaves one cycle after it is selected, one per cycle
            reg = m.submodules.out_reg = SyncFIFO(width=rd_layout(L).size, depth=2)
            m.d.comb += [reg.w_en.eq(o.valid), reg.w_data.eq(o.payload), o.ready.eq(reg.w_rdy),
                         self.o.valid.eq(reg.r_rdy), self.o.payload.eq(reg.r_data),
                         reg.r_en.eq(self.o.ready)]
        return m


class _LineWriter(wiring.Component):
    """Beats of a ``rows x cols`` matrix (row-major) into masked line writes.

    ``start`` latches ``base``, ``rows``, ``cols`` and ``narrow`` and clears ``fin``. Element
    ``(r, c)`` goes to word ``c % S`` of line ``base + r * ceil(cols / S) + c // S``. A beat
    is a group of ``L`` elements from column ``c`` (a multiple of ``L``; words past the row's
    end are not written), or one element in ``i.payload[0]`` with ``narrow``. A line is
    written (one write, ``w_en`` = the words received) in the cycle its last beat or its row's
    last beat arrives: padding words are never written. ``i`` is always ready. ``fin`` rises
    with the edge that performs the last write. ``eol``: the next beat is the last of its row.
    """

    def __init__(self, *, line_bits: int, S: int, L: int):
        self.S, self.L = S, L
        super().__init__({
            "w_addr": Out(line_bits), "w_en": Out(S), "w_data": Out(32 * S),
            "start": In(1), "base": In(line_bits), "rows": In(DIM_BITS), "cols": In(DIM_BITS),
            "narrow": In(1),
            "i": In(stream.Signature(data.ArrayLayout(32, L))),
            "fin": Out(1),
            "eol": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        S, L = self.S, self.L
        lgL = (L - 1).bit_length()
        lb = len(self.base)
        line = Signal(lb, name="line")
        lane = Signal(range(S), name="lane")
        r = Signal(DIM_BITS, name="row")
        c = Signal(DIM_BITS, name="col")
        rows = Signal(DIM_BITS, name="rows_q")
        cols = Signal(DIM_BITS, name="cols_q")
        narrow = Signal(name="narrow_q")
        buf = [Signal(32, name=f"buf{k}") for k in range(S)]
        mask = Signal(S, name="mask")
        x = self.i.payload
        step = Signal(range(L + 1), name="step")
        c_next = Signal(DIM_BITS + 1, name="col_next")
        # eol (c + step >= cols) from a register, kept for the next c as c moves: the adder
        # and compare were ahead of the line buffer's enables (128 end points at 12.9 ns in
        # the S = 4 FPGA core, routed); only the register's own input has them now
        eol = Signal(name="eol_q")
        narrow_in = Signal(name="narrow_in")        # ``narrow`` as ``start`` loads it
        # the line words the current beat writes, a register loaded from the next lane, column
        # and width: the columns-left subtract and compares were ahead of the line buffers'
        # enables (164 end points at 11.5 ns in the S = 4 FPGA core, routed, at 5204923)
        beat = Signal(S, name="beat_words")
        new = [Signal(32, name=f"new{k}") for k in range(S)]
        write = Signal(name="write_line")           # this beat completes its line
        lane_n = Signal.like(lane, name="lane_next")
        c_n = Signal.like(c, name="col_next_beat")
        narrow_n = Signal(name="narrow_next")
        cols_n = Signal.like(cols, name="cols_next")
        rest_n = Signal(DIM_BITS + 1, name="cols_left_next")    # cols - c (> 0 inside a row)

        def step_of(n):
            """Columns a beat covers: 1 narrow, else L."""
            return Mux(n, 1, L)

        def beat_of(ln, nw, rest):
            """Line words a beat at lane ``ln`` writes (``nw``: narrow), ``rest`` columns
            left in its row."""
            words = [(ln >> lgL == k // L) & (rest > k % L) for k in range(S)]
            return Cat(*(Mux(nw, ln == k, words[k]) if L > 1 else ln == k for k in range(S)))

        m.d.comb += [narrow_in.eq(self.narrow | (L == 1)), step.eq(step_of(narrow)),
                     c_next.eq(c + step), self.eol.eq(eol), self.w_addr.eq(line),
                     write.eq((lane == Mux(narrow, S - 1, S - L)) | eol),
                     lane_n.eq(lane), c_n.eq(c), narrow_n.eq(narrow), cols_n.eq(cols),
                     rest_n.eq(cols_n - c_n)]
        for k in range(S):
            m.d.comb += new[k].eq(Mux(narrow, x[0], x[k % L]) if L > 1 else x[0])
        m.d.comb += self.w_data.eq(Cat(*(Mux(beat[k], new[k], buf[k]) for k in range(S))))
        with m.If(self.start):
            m.d.comb += [lane_n.eq(0), c_n.eq(0), narrow_n.eq(narrow_in), cols_n.eq(self.cols)]
            m.d.sync += [line.eq(self.base), r.eq(0), mask.eq(0), rows.eq(self.rows),
                         self.fin.eq(0), eol.eq(step_of(narrow_in) >= self.cols)]
        with m.Elif(self.i.valid):
            m.d.comb += [lane_n.eq(Mux(write, 0, lane + step)), c_n.eq(Mux(eol, 0, c_next))]
            m.d.sync += eol.eq(Mux(eol, step, c_next + step) >= cols)
            with m.If(write):
                m.d.comb += self.w_en.eq(mask | beat)
                m.d.sync += [mask.eq(0), line.eq(line + 1)]
            with m.Else():
                m.d.sync += mask.eq(mask | beat)
                for k in range(S):
                    with m.If(beat[k]):
                        m.d.sync += buf[k].eq(new[k])
            with m.If(eol):
                m.d.sync += r.eq(r + 1)
                with m.If(r == rows - 1):
                    m.d.sync += self.fin.eq(1)
        m.d.sync += [lane.eq(lane_n), c.eq(c_n), narrow.eq(narrow_n), cols.eq(cols_n),
                     beat.eq(beat_of(lane_n, narrow_n, rest_n))]
        return m


class VectorUnit(wiring.Component):
    """``VEC``, ``REDUCE`` and ``SOFTMAX_XENT`` of the training core over four line ports.

    Parameters
    ----------
    config : CoreConfig
        ``size`` (``S`` words per line), the line address width and ``vec_lanes`` (``L``).
    grad_config : GradConfig
        ``lanes`` (sum-of-squares and softmax-denominator order), ``max_cols`` (bias-gradient
        accumulator: longer rows are done in column chunks of ``max_cols`` rounded down to a
        multiple of ``S``; each lane holds ``1/L`` of a chunk) and ``max_classes`` (the longest
        softmax row). Default ``GradConfig()``.
    fp32_config, divsqrt_config, log_config :
        FP32 unit pipelines; the exp (``divsqrt_config``) and log (``log_config``)
        approximations. Defaults: the classes' defaults.

    Attributes
    ----------
    lanes : int
        ``L``: elements per cycle of ``VEC`` and ``REDUCE BIAS_GRAD``.
    ew_latency, bg_latency, sumsq_latency, softmax_latency : int
        The ``latency`` of the :class:`Elementwise`, :class:`BiasGrad`, :class:`LaneSum` and
        :class:`SoftmaxXent` inside (``sumsq_latency`` and ``sumsq_overhead`` are ``None``
        when ``config.vector_sumsq`` is off: no LaneSum, and the sequencer rejects ``REDUCE
        SUMSQ``).
    vec_overhead, copy_overhead, bg_overhead, sumsq_overhead : int
        Fixed cycles of a command (see :meth:`cycles`).
    bg_chunk : int
        Columns per bias-gradient chunk (``max_cols`` rounded down to a multiple of ``S``).
    bg_row_min : int
        A bias-gradient row (chunk) of fewer beats than this (``Ladd + 2``) pauses the input
        for the difference after every row but the last (the accumulator's read-modify-write
        loop).

    Timing (:meth:`cycles`, exact, asserted by tests/test_vector_unit.py; ``beats(w) = ceil(w
    / L)``; the count is from the cycle ``cmd`` is accepted to the ``done`` cycle):

    * ``VEC``: ``rows * beats(cols) + vec_overhead`` (``Lew + 5``); ``COPY``/``ZERO``:
      ``rows * beats(cols) + copy_overhead`` (3).
    * ``REDUCE SUMSQ``: ``rows * cols + sumsq_overhead`` (LaneSum latency + 3).
    * ``REDUCE BIAS_GRAD``: per chunk of ``w`` columns, ``g = beats(w)``: ``rows * g + (rows
      - 1) * max(0, bg_row_min - g) + g + bg_overhead`` (BiasGrad latency + 9), plus ``Lew +
      2`` with ``acc``; chunks add up.
    * ``SOFTMAX_XENT``: ``rows * max(cols, lanes) + softmax_latency + 2 * cols + 2``.

    With ``config.vector_read_reg`` (:attr:`read_reg` = 1) every overhead above, and the
    softmax's count, is one cycle more; with ``config.spad_reg`` too (ports of read
    latency 2, :attr:`read_reg` = 2) two cycles more, and with ``config.spad_out_reg``
    (latency 3, :attr:`read_reg` = 3) three.

    Members
    -------
    cmd : In(stream.Signature(VECTOR_CMD))
        One command, accepted only while idle (``ready = ~busy``). Assumed valid (the
        sequencer checks ranges, banks and fields).
    busy : Out(1)
        From the cycle after ``cmd`` is accepted to the ``done`` cycle, inclusive.
    done : Out(1)
        One-cycle pulse in the cycle after the command's last memory write.
    a, b, d, e : Out(LinePort(addr_bits=config.line_bits, words=config.size))
        ``a``: read ``VEC a``, ``REDUCE a``, ``SOFTMAX z``; ``b``: read ``VEC b``, ``SOFTMAX``
        labels; ``d``: write the result (read ``d_old`` for ``REDUCE BIAS_GRAD`` with
        ``acc``); ``e``: write the ``SOFTMAX`` per-row loss. Unused enables are 0 (a read
        address may hold a stale line); a port is read only where the ISA's operand ranges
        say so.
    d_reads : Out(1)
        A register: the command taken last is ``REDUCE BIAS_GRAD`` with ``acc``, the only
        one that reads on ``d``; otherwise only ``b`` reads of the two (the core's
        :class:`~hdl.lib.memport.SharedLinePort` for ``b`` and ``d`` is selected by it).
    opt_add0, opt_mul0, opt_div0 : In(UnitPort(kind)), only with ``config.optim_shared_units``
        The optimizer's ports to its first shared adder, multiplier and its divider
        (:class:`~hdl.optim.engine.OptimEngine` ``units``): they join the pools of the
        softmax's ``p - onehot`` adder, its gradient multiplier and its divider. Whoever
        drives them must not issue while a command runs (the sequencer keeps ``OPT`` and
        the vector instructions apart); idle ports have ``valid = 0``.
    """

    def __init__(self, *, config: CoreConfig, grad_config: GradConfig | None = None,
                 fp32_config: FP32Config | None = None,
                 divsqrt_config: FP32DivSqrtConfig | None = None,
                 log_config: FP32LogConfig | None = None):
        def check(name, value, cls, optional=True):
            if (value is None and optional) or isinstance(value, cls):
                return
            _used(self)
            raise TypeError(f"VectorUnit.{name} must be a {cls.__name__}"
                            f"{' or None' if optional else ''}, not {type(value).__name__} "
                            f"{value!r}")

        check("config", config, CoreConfig, optional=False)
        check("grad_config", grad_config, GradConfig)
        check("fp32_config", fp32_config, FP32Config)
        check("divsqrt_config", divsqrt_config, FP32DivSqrtConfig)
        check("log_config", log_config, FP32LogConfig)
        self.config = config
        self.grad_config = grad_config if grad_config is not None else GradConfig()
        self.fp32_config = fp32_config if fp32_config is not None else FP32Config()
        self.divsqrt_config = (divsqrt_config if divsqrt_config is not None
                               else FP32DivSqrtConfig())
        self.log_config = log_config if log_config is not None else FP32LogConfig()
        S = config.size
        L = self.lanes = config.vec_lanes
        self.bg_chunk = (self.grad_config.max_cols // S) * S
        if self.bg_chunk == 0:
            _used(self)
            raise ValueError(f"VectorUnit.grad_config.max_cols ({self.grad_config.max_cols}) "
                             f"must be >= the line size S = {S}")
        la = self.fp32_config.latency("fp32_add")
        if la >= self.grad_config.lanes:
            _used(self)
            raise ValueError(f"VectorUnit.grad_config.lanes ({self.grad_config.lanes}) must "
                             f"exceed the FP32 adder latency ({la})")
        # each bias-gradient lane accumulates every L-th column of a chunk
        bg_config = dataclasses.replace(self.grad_config,
                                        max_cols=max(2, self.bg_chunk // L))
        # config.vector_shared_units (one lane): the elementwise add and multiply and the
        # bias-gradient add use three of the softmax's OUT units, one instruction at a time;
        # each such operation takes one cycle more (the pooled unit's operand register)
        shared = config.vector_shared_units
        # config.optim_shared_units: the softmax's divide too (one more cycle: the pool)
        sx_units = (("add", "mul", "add") if shared else ()) + (
            ("div",) if config.optim_shared_units else ())
        try:
            self._ew = [_used(Elementwise(fp32_config=self.fp32_config,
                                          units=("add", "mul") if shared and j == 0 else ()))
                        for j in range(L)]
            self._bg = [_used(BiasGrad(config=bg_config, fp32_config=self.fp32_config,
                                       units=("add",) if shared and j == 0 else ()))
                        for j in range(L)]
            self._ls = (_used(LaneSum(config=self.grad_config, square=True,
                                      fp32_config=self.fp32_config))
                        if config.vector_sumsq else None)
            self._sx = _used(SoftmaxXent(config=self.grad_config, fp32_config=self.fp32_config,
                                         divsqrt_config=self.divsqrt_config,
                                         log_config=self.log_config,
                                         read_reg=config.vector_read_reg,
                                         serial_log=config.serial_log,
                                         units=sx_units))
        except (ValueError, TypeError):
            _used(self)
            raise
        self.ew_latency = self._ew[0].latency
        self.bg_latency = self._bg[0].latency
        self.sumsq_latency = self._ls.latency if self._ls is not None else None
        self.softmax_latency = self._sx.latency
        # accept -> START (1) -> reader A's first beat (2) -> Elementwise (Lew) and its
        # output FIFO (2) -> one beat per cycle -> done the cycle after the last write.
        # Every formula of cycles() is asserted exactly by tests/test_vector_unit.py.
        # config.vector_read_reg: the readers' register stage adds one cycle to each;
        # the ports' read latency over 1 (config.spad_reg, spad_out_reg) one more per cycle
        self.read_reg = r = int(config.vector_read_reg) + config.spad_latency - 1
        self.vec_overhead = self.ew_latency + 5 + r
        self.copy_overhead = 3 + r
        self.sumsq_overhead = self.sumsq_latency + 3 + r if self._ls is not None else None
        self.bg_overhead = self.bg_latency + 9 + r
        self.bg_row_min = self.bg_latency + 1      # the adder's latency + 2
        lb = config.line_bits
        super().__init__({
            "cmd": In(stream.Signature(VECTOR_CMD)),
            "busy": Out(1),
            "done": Out(1),
            "a": Out(LinePort(addr_bits=lb, words=S)),
            "b": Out(LinePort(addr_bits=lb, words=S)),
            "d": Out(LinePort(addr_bits=lb, words=S)),
            "e": Out(LinePort(addr_bits=lb, words=S)),
            "d_reads": Out(1),
            **({f"opt_{k}0": In(UnitPort(k)) for k in ("add", "mul", "div")}
               if config.optim_shared_units else {}),
        })

    def cycles(self, op: int, rows: int, cols: int, *, vop: int = Vop.ADD,
               rop: int = Rop.BIAS_GRAD, acc: int = 0) -> int:
        """Cycles from the cycle ``cmd`` is accepted to the ``done`` cycle (exact; the class
        docstring lists the formulas)."""
        L = self.lanes
        if op == Op.VEC:
            beats = rows * -(-cols // L)
            return beats + (self.copy_overhead if vop in (Vop.COPY, Vop.ZERO)
                            else self.vec_overhead)
        if op == Op.REDUCE and rop == Rop.SUMSQ:
            if self._ls is None:
                raise ValueError("VectorUnit.cycles: this unit has no REDUCE SUMSQ "
                                 "(CoreConfig.vector_sumsq is False)")
            return rows * cols + self.sumsq_overhead
        if op == Op.REDUCE:
            total = 0
            for c0 in range(0, cols, self.bg_chunk):
                g = -(-min(self.bg_chunk, cols - c0) // L)
                total += (rows * g + (rows - 1) * max(0, self.bg_row_min - g) + g
                          + self.bg_overhead + (self.ew_latency + 2 if acc else 0))
            return total
        if op == Op.SOFTMAX_XENT:
            return (rows * max(cols, self.grad_config.lanes) + self.softmax_latency + 2 * cols
                    + 2 + self.read_reg)
        raise ValueError(f"op must be VEC, REDUCE or SOFTMAX_XENT, not {op!r}")

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, L = cfg.size, self.lanes
        lg = (S - 1).bit_length()
        lgL = (L - 1).bit_length()
        lb = cfg.line_bits

        ews, bgs = self._ew, self._bg
        for j in range(L):
            m.submodules[f"ew{j}"] = ews[j]
            m.submodules[f"bg{j}"] = bgs[j]
        ew, bg = ews[0], bgs[0]                     # lane 0's handshakes stand for all lanes
        ls = self._ls                               # None: no REDUCE SUMSQ (vector_sumsq)
        if ls is not None:
            m.submodules.sumsq = ls
        m.submodules.sx = sx = self._sx
        if cfg.vector_shared_units:
            # the softmax's OUT units p - onehot (add), the gradient's scale (mul) and
            # z_y - max (add), each also serving one of lane 0's datapaths
            # (and with config.optim_shared_units the optimizer's adder, multiplier, divider)
            fc = self.fp32_config
            opt = ({k: [getattr(self, f"opt_{k}0")] for k in ("add", "mul", "div")}
                   if cfg.optim_shared_units else {"add": [], "mul": [], "div": []})
            pool_unit(m, "shared_add0", FP32Add(config=fc),
                      [sx.unit_add0, ew.unit_add0] + opt["add"])
            pool_unit(m, "shared_mul0", FP32Mul(config=fc),
                      [sx.unit_mul0, ew.unit_mul0] + opt["mul"])
            pool_unit(m, "shared_add1", FP32Add(config=fc), [sx.unit_add1, bg.unit_add0])
            if cfg.optim_shared_units:
                pool_unit(m, "shared_div0", FP32Div(config=self.divsqrt_config),
                          [sx.unit_div0] + opt["div"])
        reg = cfg.vector_read_reg
        lat = cfg.spad_latency              # the ports' read latency
        m.submodules.rd_a = ra = _LineReader(line_bits=lb, S=S, L=L, out_reg=reg, latency=lat)
        m.submodules.rd_b = rb = _LineReader(line_bits=lb, S=S, L=L, out_reg=reg, latency=lat)
        m.submodules.rd_d = rd = _LineReader(line_bits=lb, S=S, L=L, out_reg=reg, latency=lat)
        m.submodules.wr_d = wd = _LineWriter(line_bits=lb, S=S, L=L)
        m.submodules.wr_e = we = _LineWriter(line_bits=lb, S=S, L=L)

        # ---- ports ------------------------------------------------------------------------
        m.d.comb += [
            self.a.r_addr.eq(ra.r_addr), self.a.r_en.eq(ra.r_en), ra.r_data.eq(self.a.r_data),
            self.b.r_addr.eq(rb.r_addr), self.b.r_en.eq(rb.r_en), rb.r_data.eq(self.b.r_data),
            self.d.r_addr.eq(rd.r_addr), self.d.r_en.eq(rd.r_en), rd.r_data.eq(self.d.r_data),
            self.d.w_addr.eq(wd.w_addr), self.d.w_en.eq(wd.w_en), self.d.w_data.eq(wd.w_data),
            self.e.w_addr.eq(we.w_addr), self.e.w_en.eq(we.w_en), self.e.w_data.eq(we.w_data),
        ]

        # ---- command registers --------------------------------------------------------------
        p = self.cmd.payload
        is_vec = Signal(name="is_vec")
        is_bias = Signal(name="is_bias")
        is_sumsq = Signal(name="is_sumsq")
        is_sx = Signal(name="is_softmax")
        bypass = Signal(name="vec_bypass")          # COPY / ZERO: reader A -> writer D
        zero = Signal(name="vec_zero")
        use_b = Signal(name="vec_reads_b")
        bcast = Signal(name="bcast")
        acc = Signal(name="acc")
        vop = Signal(3, name="vop")
        rows = Signal(DIM_BITS, name="rows")
        cols = Signal(DIM_BITS, name="cols")
        adr_a = Signal(lb, name="addr_a")
        adr_b = Signal(lb, name="addr_b")
        adr_d = Signal(lb, name="addr_d")
        adr_e = Signal(lb, name="addr_e")
        imm = Signal(32, name="imm")
        gscale = Signal(32, name="gscale")
        lines = Signal(lb, name="lines_per_row")    # ceil(cols / S)
        narrow = Signal(name="narrow")              # SUMSQ, SOFTMAX: one element per beat
        m.d.comb += narrow.eq(is_sumsq | is_sx)
        # bias-gradient column chunks
        c0 = Signal(DIM_BITS, name="chunk_col")     # first column of the chunk
        cw = Signal(DIM_BITS, name="chunk_cols")    # columns in the chunk
        rest = Signal(DIM_BITS + 1, name="chunk_rest")   # columns from c0 to the end
        W = self.bg_chunk
        m.d.comb += [rest.eq(cols - c0), cw.eq(Mux(rest > W, W, rest))]
        # another chunk after this one, a register following the chunk every cycle: the
        # chunk does not change from START on (RUN comes a cycle later), so RUN's ``done``
        # does not wait for the subtract and compare (``cols`` through them into the
        # sequencer's unit ownership was the S = 4 FPGA core's routed critical path at
        # 339a669, 13.52 ns)
        more = Signal(name="chunk_more")
        m.d.sync += more.eq(is_bias & (rest > W))
        bg_cmd_v = Signal(name="bg_cmd_valid")
        # every lane: ceil(cw / L) columns (lanes past cw run on padding), from a register
        # that follows the chunk every cycle: the lanes take their command in the cycle after
        # START, and the chunk does not change from START on
        bg_cols = Signal(DIM_BITS, name="bg_cols")
        m.d.sync += bg_cols.eq((cw + L - 1) >> lgL)
        for b_ in bgs:
            m.d.comb += [b_.cmd.valid.eq(bg_cmd_v), b_.cmd.payload.rows.eq(rows),
                         b_.cmd.payload.cols.eq(bg_cols)]
        with m.If(bg.cmd.ready):
            m.d.sync += bg_cmd_v.eq(0)

        start = Signal(name="start")
        c0_line = Signal(lb, name="chunk_line")
        m.d.comb += c0_line.eq(c0 >> lg)
        with m.FSM(name="vu"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                # The command registers follow the command's payload in every idle cycle and
                # hold it from the accepted command on: their enable is the state, not
                # ``cmd.valid`` (in the S = 4 FPGA core at 47febd6 that enable, behind the
                # sequencer's issue, was 12.7 ns routed on ~130 of them). Nothing reads them
                # while idle: every stream is empty once ``done`` has been raised.
                op = p.op
                v, rr, sm = p.args.vec, p.args.reduce, p.args.softmax
                with m.If(self.cmd.valid):
                    m.d.sync += self.d_reads.eq((op == Op.REDUCE) & (rr.rop == Rop.BIAS_GRAD)
                                                & p.acc)
                    m.next = "START"
                m.d.sync += [
                    is_vec.eq(op == Op.VEC),
                    is_bias.eq((op == Op.REDUCE) & (rr.rop == Rop.BIAS_GRAD)),
                    is_sumsq.eq((op == Op.REDUCE) & (rr.rop == Rop.SUMSQ)
                                & (ls is not None)),
                    is_sx.eq(op == Op.SOFTMAX_XENT),
                    bypass.eq((v.vop == Vop.COPY) | (v.vop == Vop.ZERO)),
                    zero.eq((op == Op.VEC) & (v.vop == Vop.ZERO)),
                    use_b.eq((v.vop == Vop.ADD) | (v.vop == Vop.RELU_GRAD)
                             | (v.vop == Vop.ADD_RELU)),
                    bcast.eq(v.bcast), vop.eq(v.vop), imm.eq(v.imm),
                    acc.eq(p.acc), gscale.eq(p.gscale), c0.eq(0),
                ]
                # rows, cols and a share their positions in every args layout; b, d, e
                # differ between VEC/SOFTMAX and REDUCE.
                with m.Switch(op):
                    with m.Case(Op.VEC):
                        m.d.sync += [rows.eq(v.rows), cols.eq(v.cols), adr_a.eq(v.a),
                                     adr_b.eq(v.b), adr_d.eq(v.d),
                                     lines.eq((v.cols + S - 1) >> lg)]
                    with m.Case(Op.REDUCE):
                        m.d.sync += [rows.eq(rr.rows), cols.eq(rr.cols), adr_a.eq(rr.a),
                                     adr_d.eq(rr.d), lines.eq((rr.cols + S - 1) >> lg)]
                    with m.Default():
                        m.d.sync += [rows.eq(sm.rows), cols.eq(sm.cols), adr_a.eq(sm.a),
                                     adr_b.eq(sm.b), adr_d.eq(sm.d), adr_e.eq(sm.e),
                                     lines.eq((sm.cols + S - 1) >> lg)]
            with m.State("START"):
                m.d.comb += [self.busy.eq(1), start.eq(1)]
                m.d.sync += bg_cmd_v.eq(is_bias)
                m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                with m.If(wd.fin & (we.fin | ~is_sx)):
                    with m.If(more):
                        m.d.sync += c0.eq(c0 + W)
                        m.next = "START"
                    with m.Else():
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"

        # ---- reader / writer programs ---------------------------------------------------------
        # A: the matrix a (every op; ZERO emits +0 without reading); bias: the chunk's columns.
        m.d.comb += [
            ra.start.eq(start), ra.base.eq(adr_a + Mux(is_bias, c0_line, 0)), ra.rows.eq(rows),
            ra.cols.eq(Mux(is_bias, cw, cols)), ra.stride.eq(lines), ra.zero.eq(zero),
            ra.narrow.eq(narrow),
            # B: VEC b (matrix, or one row when bcast) / SOFTMAX labels (a vector of rows)
            rb.start.eq(start & ((is_vec & use_b) | is_sx)), rb.base.eq(adr_b),
            rb.rows.eq(Mux(is_sx, 1, rows)), rb.cols.eq(Mux(is_sx, rows, cols)),
            rb.stride.eq(Mux(bcast & ~is_sx, 0, lines)), rb.zero.eq(0), rb.narrow.eq(narrow),
            # D: d_old of an accumulating bias gradient (the chunk's words)
            rd.start.eq(start & is_bias & acc), rd.base.eq(adr_d + c0_line), rd.rows.eq(1),
            rd.cols.eq(cw), rd.stride.eq(0), rd.zero.eq(0), rd.narrow.eq(0),
            # writer D: VEC / SOFTMAX matrix, bias vector chunk, SUMSQ one word
            wd.start.eq(start), wd.base.eq(adr_d + Mux(is_bias, c0_line, 0)),
            wd.rows.eq(Mux(is_vec | is_sx, rows, 1)),
            wd.cols.eq(Mux(is_bias, cw, Mux(is_sumsq, 1, cols))), wd.narrow.eq(narrow),
            # writer E: SOFTMAX loss vector
            we.start.eq(start & is_sx), we.base.eq(adr_e), we.rows.eq(1), we.cols.eq(rows),
            we.narrow.eq(1),
        ]

        # ---- stream routing -----------------------------------------------------------------
        A, B, D = ra.o, rb.o, rd.o
        m.d.comb += [sx.o.ready.eq(1), sx.gscale.eq(gscale)]
        if ls is not None:
            m.d.comb += ls.o.ready.eq(1)
        for e_, b_ in zip(ews, bgs):
            m.d.comb += [e_.o.ready.eq(1), b_.db.ready.eq(1),
                         e_.op.eq(Mux(is_bias, EW_ADD, vop)), e_.scale.eq(imm)]
        ew_valid = Signal(name="ew_valid")          # into every Elementwise lane
        bg_valid = Signal(name="bg_valid")          # into every BiasGrad lane
        for e_, b_ in zip(ews, bgs):
            m.d.comb += [e_.i.valid.eq(ew_valid), b_.dy.valid.eq(bg_valid)]
        ew_path = Signal(name="ew_path")             # writer D fed by the Elementwise lanes
        m.d.comb += ew_path.eq((is_vec & ~bypass) | (is_bias & acc))
        with m.If(is_vec & ~bypass):
            b_ok = B.valid | ~use_b
            m.d.comb += [ew_valid.eq(A.valid & b_ok),
                         A.ready.eq(ew.i.ready & b_ok), B.ready.eq(ew.i.ready & A.valid)]
            for j, e_ in enumerate(ews):
                m.d.comb += [e_.i.payload.a.eq(A.payload.x[j]), e_.i.payload.b.eq(B.payload.x[j])]
        with m.If(is_vec & bypass):
            m.d.comb += A.ready.eq(1)
        with m.If(is_bias):
            m.d.comb += [bg_valid.eq(A.valid), A.ready.eq(bg.dy.ready)]
            for j, b_ in enumerate(bgs):
                m.d.comb += b_.dy.payload.eq(A.payload.x[j])
            with m.If(acc):
                # d = d_old + db (Elementwise ADD: a + b with a = d_old, b = db), per lane
                for b_ in bgs:
                    m.d.comb += b_.db.ready.eq(ew.i.ready & D.valid)
                m.d.comb += [D.ready.eq(ew.i.ready & bg.db.valid),
                             ew_valid.eq(D.valid & bg.db.valid)]
                for j, (e_, b_) in enumerate(zip(ews, bgs)):
                    m.d.comb += [e_.i.payload.a.eq(D.payload.x[j]),
                                 e_.i.payload.b.eq(b_.db.payload.r)]
        if ls is not None:
            with m.If(is_sumsq):
                m.d.comb += [ls.i.valid.eq(A.valid), ls.i.payload.x.eq(A.payload.x[0]),
                             ls.i.payload.last.eq(A.payload.last), A.ready.eq(ls.i.ready)]
        with m.If(is_sx):
            m.d.comb += [sx.i.valid.eq(A.valid & B.valid), sx.i.payload.x.eq(A.payload.x[0]),
                         sx.i.payload.label.eq(B.payload.x[0][:16]),
                         sx.i.payload.last.eq(A.payload.eol),
                         A.ready.eq(sx.i.ready & B.valid),
                         B.ready.eq(sx.i.ready & A.valid & A.payload.eol)]

        wdi = wd.i.payload
        with m.If(ew_path):
            m.d.comb += wd.i.valid.eq(ew.o.valid)
            m.d.comb += [wdi[j].eq(e_.o.payload.r) for j, e_ in enumerate(ews)]
        with m.Elif(is_vec):
            m.d.comb += [wd.i.valid.eq(A.valid), wdi.eq(A.payload.x)]
        with m.Elif(is_bias):
            m.d.comb += wd.i.valid.eq(bg.db.valid)
            m.d.comb += [wdi[j].eq(b_.db.payload.r) for j, b_ in enumerate(bgs)]
        with m.Elif(is_sumsq):
            if ls is not None:
                m.d.comb += [wd.i.valid.eq(ls.o.valid), wdi[0].eq(ls.o.payload.r)]
        with m.Elif(is_sx):
            m.d.comb += [wd.i.valid.eq(sx.o.valid), wdi[0].eq(sx.o.payload.r)]
        # The loss of a row goes with its last gradient. (Gating with writer D's row end keeps a
        # command with cols > max_classes, which SoftmaxXent would cut into several rows and
        # the sequencer must reject, from writing outside the e range.)
        m.d.comb += [we.i.valid.eq(is_sx & sx.o.valid & sx.o.payload.last & wd.eol),
                     we.i.payload[0].eq(sx.o.payload.loss)]
        return m
