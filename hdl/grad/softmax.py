"""Softmax + cross-entropy gradient per row, with the max subtraction; rows overlap.

For each row ``z[0..C-1]`` with label ``y`` (golden model :func:`sim.model.grad.softmax_xent`)::

    mx   = max_j z_j                 (ordered bit keys, -0 < +0; NaN if any z is NaN)
    e_j  = exp(z_j - mx)             (FP32 sub, then the hardware exp approximation)
    s    = row_sum(e)                (:mod:`hdl.grad.rowsum` order)
    g_j  = (e_j / s - [j == y]) * gscale     (gscale = loss scale / batch size, a register)
    zt   = z_y - mx                  (the EXP subtraction of element y, taken as it passes)
    loss = log(s) - zt               (the hardware log, :class:`hdl.fp32.log.FP32Log`)

Three stages work on three different rows at once (one element per cycle each):

* **LOAD** (row r+2): accepts logits, writes them into one of two row banks (double-buffered
  memory), tracks the max, the NaN flag and the label.
* **EXP** (row r+1): reads the other bank, ``e = exp(z - mx)``; ``e`` goes into the *e FIFO*
  (a circular buffer in memory) and into the row sum (:func:`~hdl.grad.rowsum.row_sum`,
  ``max(C, lanes)`` slots per row). ``zt`` is element ``y``'s ``z - mx`` (``+0 - mx`` when
  the label is not an element of the row: ``-mx``, ``+0`` for a zero ``mx``, the canonical NaN
  for a NaN), into a FIFO at the row's last slot. Row descriptors go into a FIFO for OUT.
* **OUT** (row r): once the row's sum has arrived (its header popped into registers, a cycle),
  reads ``e`` back from the e FIFO and streams
  ``g`` (and the row's loss) out through a credit FIFO (backpressure never drops data).

With ``serial_log`` (the FPGA build) ``log(s)`` is not an OUT operation: each row's sum also
goes through a FIFO (buffered: registered read data) into
:class:`~hdl.fp32.log_serial.FP32LogSerial` (two multipliers instead of seven, one row every 7
cycles, which rows of ``max(C, lanes) >= 8`` slots never outrun) and its result into a FIFO that
OUT waits for with the sum; a row's first gradient comes ``LOG_SERIAL_LATENCY + 2`` cycles
later, the words are the same.

The EXP stage starts only when the e FIFO has room and fewer than ``rows_in_flight`` rows are
between EXP and OUT's row header (so the row FIFOs of that depth never overflow); both bounds are sized so that rows of ``C >= lanes`` classes
stream at one element per cycle.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..fp32.log_config import FP32LogConfig
from ..fp32.log_serial import LOG_SERIAL_II, LOG_SERIAL_LATENCY, FP32LogSerial
from ..lib.blockfifo import BufferedFIFO
from ..lib.dataflow import Dataflow, check_units, credit_fifo, unit_members, unit_ports
from ..lib.fp32bits import is_nan, order_key
from ..lib.mustuse import mark_used, used_if_rejected
from ..lib.streamreg import StreamRegister
from .config import GradConfig
from .rowsum import row_sum, row_sum_latency

__all__ = ["SoftmaxXent", "SX_IN_LAYOUT", "SX_OUT_LAYOUT"]

SX_IN_LAYOUT = data.StructLayout({"x": 32, "label": 16, "last": 1})
SX_OUT_LAYOUT = data.StructLayout({"r": 32, "last": 1, "sum": 32, "zt": 32, "loss": 32})
ONE = 0x3F800000
QNAN = 0x7FC00000


class GradDataflow(Dataflow):
    """:class:`~hdl.lib.dataflow.Dataflow` with the FP32 natural log
    (:class:`hdl.fp32.log.FP32Log`, latency ``log_config.latency``)."""

    def __init__(self, m, valid, *, log_config: FP32LogConfig, **kwargs):
        super().__init__(m, valid, **kwargs)
        self.log_config = log_config

    def log(self, a, *, name: str):
        def make():
            from ..fp32.log import FP32Log
            return FP32Log(config=self.log_config)
        return self._unit(make, self.log_config.latency, name, {"a": a})


class SoftmaxXent(wiring.Component):
    """Softmax cross-entropy gradient and loss terms, rows streamed back to back.

    Parameters
    ----------
    config : GradConfig
        ``max_classes`` (row bank depth) and ``lanes`` (denominator summation order).
    fp32_config, divsqrt_config, log_config : unit configurations.
    read_reg : bool
        A register after the e FIFO's read (the FPGA build): ``e`` enters the divider from
        flip-flops instead of from the block RAM's output; a register stage
        (:class:`~hdl.lib.streamreg.StreamRegister`) on ``i``, so the row maximum's compare
        starts at flip-flops; and the output FIFO's head in a register
        (:func:`~hdl.lib.dataflow.credit_fifo`'s ``reg_head``): :attr:`latency` three cycles
        more.
    serial_log : bool
        ``log(s)`` once per row on :class:`~hdl.fp32.log_serial.FP32LogSerial` (the FPGA build:
        6 DSPs instead of 26) between the row sum and OUT, instead of the pipelined
        :class:`~hdl.fp32.log.FP32Log` inside OUT; :attr:`latency` :attr:`log_wait` cycles
        more, the same words. Needs ``config.lanes`` >= ``LOG_SERIAL_II`` (7), so the
        log keeps up with rows of one element per cycle.
    units : tuple of str
        Kinds of the OUT dataflow's operations that use units outside the component, in the
        order it builds them per kind (``div`` ``p``, ``add`` ``p - onehot``, ``mul`` the
        gradient's scale, ``add`` the loss): :class:`~hdl.lib.dataflow.UnitPort` members
        ``unit_<kind><n>`` (default none; the FPGA build's vector unit shares them).

    Attributes
    ----------
    latency : int
        With the block idle and no backpressure, a row's first gradient is valid on ``o``
        ``latency + max(C, lanes)`` cycles after its last logit was accepted (the EXP pass
        over the row, the sum, the OUT pipeline and the output FIFO).
    exp_latency, out_latency, sum_latency : int
        Depths of the EXP dataflow (``z`` to ``e``), of the OUT dataflow (``e`` to ``g``) and
        of the row sum (last slot to ``s``).
    efifo_depth : int
        Entries of the e FIFO: ``max_classes`` plus the EXP-to-OUT delay of a row.
    rows_in_flight : int
        Rows allowed between the start of EXP and OUT's taking of the row's header.
    log_wait : int
        Cycles a row's sum waits for its log before OUT may start the row: ``LOG_SERIAL_LATENCY
        + 2`` with ``serial_log``, else 0.

    Members
    -------
    i : In(stream.Signature(SX_IN_LAYOUT))
        Logits ``x`` (FP32) of one row, ``last`` on the row's final class; ``label`` is taken
        from the row's first element. Rows of 1..max_classes classes (a longer row is cut after
        ``max_classes`` elements: the rest forms a new row). A label ``>= C`` gives no onehot
        term and ``z_y = +0``.
    o : Out(stream.Signature(SX_OUT_LAYOUT))
        Gradient ``r`` (FP32) per class in order; ``last`` on the row's final class; ``sum``
        = s, ``zt`` = z_y - max and ``loss`` = log(s) - zt (FP32) of the row (the same on
        every element of the row).
    gscale : In(32)
        FP32 factor applied to the gradient (``1/B``, or ``2**k / B`` with loss scaling).
        Read when an element reaches the final multiply: change it only while no row is in
        flight.
    """

    def __init__(self, *, config: GradConfig | None = None,
                 fp32_config: FP32Config | None = None,
                 divsqrt_config: FP32DivSqrtConfig | None = None,
                 log_config: FP32LogConfig | None = None, read_reg: bool = False,
                 serial_log: bool = False, units: tuple = ()):
        for name, value in (("read_reg", read_reg), ("serial_log", serial_log)):
            if not isinstance(value, bool):
                mark_used(self)
                raise TypeError(f"SoftmaxXent.{name} must be a bool, not {value!r}")
        self.serial_log = serial_log
        self.config = config or GradConfig()
        self.fp32_config = fp32_config or FP32Config()
        self.divsqrt_config = divsqrt_config or FP32DivSqrtConfig()
        self.log_config = log_config or FP32LogConfig()
        with used_if_rejected(self):
            self.units = check_units("SoftmaxXent", units, self._out_dataflow(None, ops=True))
        la = self.fp32_config.latency("fp32_add")
        if la >= self.config.lanes:
            mark_used(self)                  # rejected: no "never used" warning
            raise ValueError(f"GradConfig.lanes ({self.config.lanes}) must exceed the FP32 adder "
                             f"latency ({la})")
        if serial_log and self.config.lanes < LOG_SERIAL_II:
            mark_used(self)
            raise ValueError(f"GradConfig.lanes ({self.config.lanes}) must be >= the serial "
                             f"log's initiation interval ({LOG_SERIAL_II}) with serial_log")
        self.log_wait = LOG_SERIAL_LATENCY + 2 if serial_log else 0
        self.exp_latency = self._exp_dataflow(None).t
        self.out_latency = self._out_dataflow(None)
        self.sum_latency = row_sum_latency(self.config.lanes, self.fp32_config)
        # EXP issue (+1 memory read) -> e -> sum -> s FIFO (+1) -> OUT's row header (+1) ->
        # OUT issue (+1 read) -> g -> credit FIFO (2 cycles: SyncFIFOBuffered). serial_log: s
        # -> log FIFO (+2: buffered) -> log -> OUT's log FIFO (+1 beside the s FIFO's):
        # log_wait cycles more.
        self.read_reg = int(bool(read_reg))
        self.latency = (2 + self.exp_latency + self.sum_latency + 2 + self.out_latency + 2
                        + 3 * self.read_reg + self.log_wait)
        # last EXP slot -> first OUT read
        delay = 2 + self.exp_latency + self.sum_latency + 3 + self.log_wait
        self.efifo_depth = self.config.max_classes + delay + 4
        self.rows_in_flight = 4 + -(-delay // self.config.lanes)
        super().__init__({
            "i": In(stream.Signature(SX_IN_LAYOUT)),
            "o": Out(stream.Signature(SX_OUT_LAYOUT)),
            "gscale": In(32),
            **unit_members(self.units),
        })

    # -- the two dataflows (m=None: timing only) -----------------------------------------------
    def _exp_dataflow(self, m, valid=None, z=None, mx=None):
        df = Dataflow(m, valid, fp32_config=self.fp32_config,
                      divsqrt_config=self.divsqrt_config, prefix="sx_exp")
        d = df.sub(df.input(z, "z"), df.input(mx, "max"), name="z_minus_max")
        e = df.exp(d, name="exp")
        if m is None:
            return e
        return df, d, e

    def _out_dataflow(self, m, valid=None, e=None, s=None, onehot=None, zt=None, log_s=None,
                      ops=False):
        df = GradDataflow(m, valid, fp32_config=self.fp32_config,
                          divsqrt_config=self.divsqrt_config, log_config=self.log_config,
                          prefix="sx_out",
                          external=None if ops else unit_ports(self if m is not None else None,
                                                              self.units))
        s_in = df.input(s, "s")
        p = df.div(df.input(e, "e"), s_in, name="p")
        g = df.sub(p, df.input(onehot, "onehot"), name="p_minus_onehot")
        r = df.mul(g, df.const(self.gscale if m is not None else None, "gscale"), name="grad")
        zt = df.input(zt, "zt")
        log_s = (df.input(log_s, "log_s") if self.serial_log else df.log(s_in, name="log_s"))
        loss = df.sub(log_s, zt, name="loss")
        t = df.time(r, zt, loss)
        if ops:                          # operations per unit kind (timing only)
            return {k: df.units(k) for k in ("add", "mul", "div", "sqrt", "exp")}
        if m is None:
            return t
        df.check_external_used()
        return df, t, r, zt, loss

    def elaborate(self, platform):
        m = Module()
        cfg, fc = self.config, self.fp32_config
        C, lanes = cfg.max_classes, cfg.lanes
        lane_bits = lanes.bit_length() - 1
        col_bits = max(1, (C - 1).bit_length())
        slots = max(C, lanes)

        # ---------------------------------------------------------------- row banks (z)
        m.submodules.zbuf = zmem = Memory(shape=32, depth=2 << col_bits, init=[])
        zw = zmem.write_port()
        zr = zmem.read_port()       # read a cycle ahead (EXP, below)
        full = Array(Signal(name=f"bank{b}_full") for b in range(2))
        b_n = Array(Signal(range(C + 1), name=f"bank{b}_n") for b in range(2))
        b_label = Array(Signal(16, name=f"bank{b}_label") for b in range(2))
        # the row's maximum as LOAD leaves it (below): the last element, the maximum before
        # it, and which of the two is the maximum; EXP selects as it takes it
        b_cand = Array(Signal(32, name=f"bank{b}_max_cand") for b in range(2))
        b_prev = Array(Signal(32, name=f"bank{b}_max_prev") for b in range(2))
        b_sel = Array(Signal(name=f"bank{b}_max_is_cand") for b in range(2))
        # the row had a NaN: its maximum reads as QNAN, selected as EXP takes the bank's
        # maximum (not between the compare and the bank's register)
        b_nan = Array(Signal(name=f"bank{b}_nan") for b in range(2))
        # the bank's last EXP slot, max(n, lanes) - 1, registered with n (EXP's next read
        # address depends on it)
        b_last = Array(Signal(range(max(C, lanes)), name=f"bank{b}_last_slot") for b in range(2))

        # ---------------------------------------------------------------- LOAD
        # read_reg: the input passes a register stage first, so the row maximum's compare
        # starts at flip-flops, not behind the producer's FIFO read and stream join (in the
        # S = 4 FPGA core the slowest estimated path, 15.8 ns, at 953b3ff)
        inp = self.i
        if self.read_reg:
            m.submodules.in_reg = in_reg = StreamRegister(SX_IN_LAYOUT)
            wiring.connect(m, wiring.flipped(self.i), in_reg.i)
            inp = in_reg.o
        wb = Signal(name="load_bank")
        lj = Signal(col_bits, name="load_col")
        l_label = Signal(16, name="load_label")
        # The running maximum is kept unresolved: the last element (``cand``), the maximum
        # before it (``prev``) and the compare's result (``cand_is_max``), with both keys
        # (order_key) in registers beside them. The maximum so far is the 2:1 select of the
        # two, one LUT level ahead of the next compare, and the compare's result goes into one
        # register instead of selecting 64 (the compare into the bank's maximum and the key
        # register, 57 + 22 end points at up to 11.3 ns in the S = 4 FPGA core at 9de3820,
        # 13.35 ns estimated at S = 8; a3a4aca had already taken the NaN select and the key
        # of the maximum off it).
        c_x = Signal(32, name="load_max_cand")
        c_key = Signal(32, name="load_max_cand_key")
        p_mx = Signal(32, name="load_max_prev")
        p_key = Signal(32, name="load_max_prev_key")
        c_sel = Signal(name="load_max_is_cand")
        l_mx = Signal(32, name="load_max")
        l_key = Signal(32, name="load_max_key")
        l_nan = Signal(name="load_any_nan")
        x = inp.payload.x
        first = lj == 0
        lab = Signal(16, name="load_label_now")
        nan_next = Signal(name="load_nan_next")
        x_key = Signal(32, name="load_key")
        x_max = Signal(name="load_new_max")     # x is the row's maximum so far
        m.d.comb += [
            l_mx.eq(Mux(c_sel, c_x, p_mx)),
            l_key.eq(Mux(c_sel, c_key, p_key)),
            lab.eq(Mux(first, inp.payload.label, l_label)),
            x_key.eq(order_key(x)),
            x_max.eq(first | (x_key > l_key)),
            nan_next.eq((l_nan & ~first) | is_nan(x)),
            inp.ready.eq(~full[wb]),
            zw.addr.eq(Cat(lj, wb)), zw.data.eq(x),
        ]
        with m.If(inp.valid & inp.ready):
            m.d.comb += zw.en.eq(1)
            m.d.sync += [l_label.eq(lab), c_x.eq(x), c_key.eq(x_key), c_sel.eq(x_max),
                         p_mx.eq(l_mx), p_key.eq(l_key), l_nan.eq(nan_next), lj.eq(lj + 1)]
            with m.If(inp.payload.last | (lj == C - 1)):
                m.d.sync += [
                    lj.eq(0), wb.eq(~wb), full[wb].eq(1),
                    b_n[wb].eq(lj + 1), b_label[wb].eq(lab),
                    b_last[wb].eq(Mux(lj + 1 > lanes, lj + 1, lanes) - 1),
                    b_cand[wb].eq(x), b_prev[wb].eq(l_mx), b_sel[wb].eq(x_max),
                    b_nan[wb].eq(nan_next),
                ]

        # ---------------------------------------------------------------- EXP
        # a row's descriptor holds its last column, n - 1 (a row has at least one element), so
        # OUT's end-of-row test is a compare with the FIFO's read data, no subtract after it
        # (in the S = 8 FPGA core at 73bcd20 the subtract was ahead of the row's FIFO reads and
        # their levels, 14.7 ns estimated)
        desc_layout = data.StructLayout({"last": range(C), "label": 16})
        K = self.rows_in_flight
        m.submodules.desc_fifo = dfifo = SyncFIFO(width=desc_layout.size, depth=K)
        m.submodules.sum_fifo = sfifo = SyncFIFO(width=32, depth=K)
        m.submodules.zt_fifo = ztfifo = SyncFIFO(width=32, depth=K)
        D = self.efifo_depth
        m.submodules.efifo = emem = Memory(shape=32, depth=D, init=[])
        ew = emem.write_port()
        er = emem.read_port()

        rb = Signal(name="exp_bank")
        ei = Signal(range(slots), name="exp_slot")
        rows = Signal(range(K + 1), name="rows_in_flight")
        eres = Signal(range(D + 1), name="efifo_reserved")
        row_start = Signal(name="exp_row_start")
        row_done = Signal(name="out_row_taken")    # a row's header leaves its FIFOs
        e_take = Signal(name="exp_take")          # an e FIFO slot reserved (non-pad slot)
        o_take = Signal(name="out_take")          # an e FIFO entry read by OUT
        n_r = Signal(range(C + 1), name="exp_n")
        last_slot = Signal(range(slots), name="exp_last_slot")
        # ei == last_slot, a register kept with ei (the bank's last slot ahead of EXP's next
        # read address was the S = 8 FPGA core's slowest estimated path, 16.05 ns at 210e109):
        # a step to ei + 1 sets it to ei + 1 == last_slot (the bank EXP reads is full, so LOAD
        # does not change its last slot), a wrap to 0 clears it (a bank has at least
        # lanes >= 2 slots, so slot 0 is never its last)
        assert lanes >= 2
        at_last = Signal(name="exp_at_last_slot")
        # ei < n (not a pad slot), a register kept with ei the same way: slot 0 is a real
        # element of every row (n >= 1), a step sets it to ei + 1 < n
        e_real = Signal(name="exp_real_slot", init=1)
        can_exp = Signal(name="exp_issue")
        # eres < D and rows < K, registers kept with the counts (their compares were ahead of
        # EXP's issue, the descriptor FIFO's level and the read-ahead address: 14.5 ns
        # estimated at 210e109)
        eres_room = Signal(name="efifo_room", init=1)
        rows_room = Signal(name="rows_room", init=1)
        m.d.comb += [
            n_r.eq(b_n[rb]),
            last_slot.eq(b_last[rb]),
            can_exp.eq(full[rb] & eres_room & ((ei != 0) | rows_room)),
            row_start.eq(can_exp & (ei == 0)),
            e_take.eq(can_exp & e_real),
        ]
        ev = Signal(name="exp_valid")
        e_mx = Signal(32, name="exp_max")
        e_pad = Signal(name="exp_pad")
        e_first = Signal(name="exp_first")
        e_final = Signal(name="exp_final")
        e_lane = Signal(max(1, lane_bits), name="exp_lane")
        e_row_first = Signal(name="exp_row_first")
        e_label = Signal(name="exp_label_slot")     # element y of the row (not a pad slot)
        e_row_last = Signal(name="exp_row_last")
        m.d.sync += ev.eq(can_exp)
        with m.If(can_exp):
            m.d.sync += [
                e_mx.eq(Mux(b_nan[rb], QNAN, Mux(b_sel[rb], b_cand[rb], b_prev[rb]))), e_pad.eq(~e_real), e_first.eq(ei < lanes),
                e_final.eq(ei + lanes > last_slot), e_lane.eq(ei[:lane_bits] if lane_bits else 0),
                e_row_first.eq(ei == 0), e_label.eq((ei == b_label[rb]) & e_real),
                e_row_last.eq(at_last),
                ei.eq(ei + 1), at_last.eq(ei + 1 == last_slot), e_real.eq(ei + 1 < n_r),
            ]
            with m.If(at_last):
                m.d.sync += [ei.eq(0), at_last.eq(0), e_real.eq(1), rb.eq(~rb),
                             full[rb].eq(0)]
        desc_in = data.View(desc_layout, dfifo.w_data)
        m.d.comb += [
            dfifo.w_en.eq(row_start),
            desc_in.last.eq(n_r - 1), desc_in.label.eq(b_label[rb]),
        ]
        rows_next = Signal.like(rows, name="rows_in_flight_next")
        eres_next = Signal.like(eres, name="efifo_reserved_next")
        m.d.comb += [rows_next.eq(rows + row_start - row_done),
                     eres_next.eq(eres + e_take - o_take)]
        m.d.sync += [rows.eq(rows_next), eres.eq(eres_next)]

        def room_next(count, up, down, limit, tag):
            # count_next < limit, from the three compares of the register ``count`` (count + 1,
            # count, count - 1) selected by the step, so no compare follows the count's adder
            # (e_take -> adder -> compare -> efifo_room, 13.33 ns routed in the S = 4 FPGA core
            # at 47febd6)
            c_up, c_same, c_down = (Signal(name=f"{tag}_{k}") for k in ("up", "same", "down"))
            m.d.comb += [c_up.eq(count + 1 < limit), c_same.eq(count < limit),
                         c_down.eq(count < limit + 1)]        # count - 1 < limit, count >= 1
            return Mux(up & ~down, c_up, Mux(down & ~up, c_down, c_same))

        m.d.sync += [rows_room.eq(room_next(rows, row_start, row_done, K, "rows_room")),
                     eres_room.eq(room_next(eres, e_take, o_take, D, "efifo_room"))]

        # z is read a cycle ahead: the port's address is the slot EXP issues next (the one
        # after ``ei`` when it issues now, else ``ei`` again), so the word is on the read data
        # when that slot issues and is registered then (``exp_z``, a fabric register after
        # the block RAM's own read register). The block RAM's read data then ends at that
        # register, not in the subtraction's unpack stage; the same cycles. A word LOAD
        # writes in the cycle of its read (EXP issues from a bank only after it is full, so
        # only the last word, of a one-word row) is taken from LOAD's registered write instead
        # of the port's old word (a read port transparent to the write would let synthesis
        # fold ``exp_z`` into the block RAM as its read register, the slow read data again in
        # front of the subtraction).
        nx_ei = Signal.like(ei, name="exp_next_slot")
        nx_rb = Signal(name="exp_next_bank")
        m.d.comb += [
            nx_ei.eq(Mux(can_exp, Mux(at_last, 0, ei + 1), ei)),
            nx_rb.eq(Mux(can_exp & at_last, ~rb, rb)),
            zr.addr.eq(Cat(nx_ei, nx_rb)),
        ]
        zr_addr_q = Signal.like(zr.addr, name="exp_read_addr")
        zw_q = Signal(name="load_wrote")
        zw_addr_q = Signal.like(zw.addr, name="load_write_addr")
        zw_data_q = Signal(32, name="load_write_data")
        m.d.sync += [zr_addr_q.eq(zr.addr), zw_q.eq(zw.en), zw_addr_q.eq(zw.addr),
                     zw_data_q.eq(zw.data)]
        z_reg = Signal(32, name="exp_z")
        with m.If(can_exp):
            m.d.sync += z_reg.eq(Mux(zw_q & (zw_addr_q == zr_addr_q), zw_data_q, zr.data))
        edf, d, e = self._exp_dataflow(m, ev, z_reg, e_mx)
        # zt: the row's label element's z - max as it leaves the subtraction (rows follow each
        # other through it in order, so a running register and a FIFO write at the row's last
        # slot keep one zt per row)
        td = d.t
        v_d = edf.valid_at(td)
        mx_d = edf.at(edf.input(e_mx, "max_zt"), td)
        zt_run = Signal(32, name="zt_running")
        zt_now = Signal(32, name="zt_now")
        zt_none = Signal(32, name="zt_no_label")       # +0 - max, the FP32 adder's result
        m.d.comb += [
            zt_none.eq(Mux(is_nan(mx_d), QNAN, Mux(mx_d[:31] == 0, 0, mx_d ^ (1 << 31)))),
            zt_now.eq(Mux(edf.at(edf.input(e_label, "label_slot"), td), edf.at(d, td),
                          Mux(edf.at(edf.input(e_row_first, "row_first"), td), zt_none,
                              zt_run))),
            ztfifo.w_en.eq(v_d & edf.at(edf.input(e_row_last, "row_last"), td)),
            ztfifo.w_data.eq(zt_now),
        ]
        with m.If(v_d):
            m.d.sync += zt_run.eq(zt_now)
        te = e.t
        v_e = edf.valid_at(te)
        pad_e = edf.at(edf.input(e_pad, "pad"), te)
        e_val = edf.at(e, te)
        ewp = Signal(range(D), name="efifo_wptr")
        m.d.comb += [ew.addr.eq(ewp), ew.data.eq(e_val)]
        with m.If(v_e & ~pad_e):
            m.d.comb += ew.en.eq(1)
            m.d.sync += ewp.eq(Mux(ewp == D - 1, 0, ewp + 1))
        s_valid, s_val = row_sum(
            m, valid=v_e, x=Mux(pad_e, 0, e_val),
            first=edf.at(edf.input(e_first, "first"), te),
            final=edf.at(edf.input(e_final, "final"), te),
            lane=edf.at(edf.input(e_lane, "lane"), te),
            lanes=lanes, fp32_config=fc, prefix="sx_sum")
        m.d.comb += [sfifo.w_en.eq(s_valid), sfifo.w_data.eq(s_val)]
        log_rdy = 1
        if self.serial_log:       # log(s) per row: s -> FIFO -> serial log -> FIFO -> OUT
            # buffered: the log's unpack starts from a register, not from a LUT RAM's read
            m.submodules.log_in_fifo = lq = BufferedFIFO(width=32, depth=K)
            m.submodules.log = lg = FP32LogSerial(config=self.log_config)
            m.submodules.log_fifo = lf = SyncFIFO(width=32, depth=K)
            m.d.comb += [
                lq.w_en.eq(s_valid), lq.w_data.eq(s_val),
                lg.i.valid.eq(lq.r_rdy), lg.i.payload.eq(lq.r_data), lq.r_en.eq(lg.i.ready),
                lf.w_en.eq(lg.o.valid), lf.w_data.eq(lg.o.payload), lg.o.ready.eq(lf.w_rdy),
            ]
            log_rdy = lf.r_rdy

        # ---------------------------------------------------------------- OUT
        # The row's header (descriptor, sum, zt, log) is popped from its FIFOs into registers
        # (``out_head_*``) when OUT has no row or at its row's last element, so ``out_accept``
        # is a register AND the output FIFO's credit, not four FIFOs' levels and the
        # descriptor's compare (in the S = 4 FPGA core at 47febd6 that AND and what it drives,
        # the e FIFO's reserved count and the FIFOs' reads, were the slowest routed paths,
        # 13.33 ns). A row whose header arrives while OUT is idle starts a cycle later.
        desc = data.View(desc_layout, dfifo.r_data)
        oj = Signal(col_bits, name="out_col")
        erp = Signal(range(D), name="efifo_rptr")
        out_accept = Signal(name="out_accept")
        h_v = Signal(name="out_head_valid")
        h_last = Signal(range(C), name="out_head_last")
        h_label = Signal(16, name="out_head_label")
        h_s = Signal(32, name="out_head_s")
        h_zt = Signal(32, name="out_head_zt")
        h_log = Signal(32, name="out_head_log_s") if self.serial_log else None
        h_at_last = Signal(name="out_head_at_last")        # oj == h_last, kept with oj
        row_end = Signal(name="out_row_end")
        h_load = Signal(name="out_head_load")
        ov = Signal(name="out_valid")
        o_onehot = Signal(name="out_onehot")
        o_last = Signal(name="out_last")
        o_s = Signal(32, name="out_s")
        o_zt = Signal(32, name="out_zt")
        o_log = Signal(32, name="out_log_s") if self.serial_log else None
        m.d.comb += [
            er.addr.eq(erp),
            row_end.eq(out_accept & h_at_last),
            row_done.eq(h_load),
            h_load.eq(sfifo.r_rdy & dfifo.r_rdy & ztfifo.r_rdy & log_rdy & (~h_v | row_end)),
            sfifo.r_en.eq(h_load), dfifo.r_en.eq(h_load), ztfifo.r_en.eq(h_load),
        ]
        if self.serial_log:
            m.d.comb += lf.r_en.eq(h_load)
        m.d.sync += ov.eq(out_accept)
        with m.If(out_accept):
            m.d.comb += o_take.eq(1)
            m.d.sync += [
                o_onehot.eq(oj == h_label), o_last.eq(h_at_last), o_s.eq(h_s), o_zt.eq(h_zt),
                *([o_log.eq(h_log)] if self.serial_log else []),
                erp.eq(Mux(erp == D - 1, 0, erp + 1)), oj.eq(oj + 1),
                h_at_last.eq(oj + 1 == h_last),
            ]
            with m.If(h_at_last):
                m.d.sync += [oj.eq(0), h_v.eq(0)]
        with m.If(h_load):
            m.d.sync += [
                h_v.eq(1), h_last.eq(desc.last), h_label.eq(desc.label), h_s.eq(sfifo.r_data),
                h_zt.eq(ztfifo.r_data), h_at_last.eq(desc.last == 0),
                *([h_log.eq(lf.r_data)] if self.serial_log else []),
            ]

        e_rd = er.data
        if self.read_reg:   # the e FIFO's read data (and what goes with it) from a register
            row = (ov, o_onehot, o_last, o_s, o_zt) + ((o_log,) if self.serial_log else ())
            regs = [Signal.like(v, name=f"{v.name}_q") for v in row]
            e_q = Signal(32, name="out_e_q")
            m.d.sync += [r.eq(v) for r, v in zip(regs, row)]
            m.d.sync += e_q.eq(er.data)
            ov, o_onehot, o_last, o_s, o_zt = regs[:5]
            o_log = regs[5] if self.serial_log else None
            e_rd = e_q
        odf, tr, r, zt, loss = self._out_dataflow(m, ov, e_rd, o_s, Mux(o_onehot, ONE, 0),
                                                  o_zt, o_log)
        # read_reg: the output FIFO's head from a register (its block RAM's read data was
        # ahead of the vector unit's write buffers and the scratchpad's registered request)
        can = credit_fifo(m, "ofifo", latency=tr + 1 + self.read_reg, accept=out_accept,
                          reg_head=bool(self.read_reg),
                          done_valid=odf.valid_at(tr),
                          done_data=Cat(odf.at(r, tr), odf.at(odf.input(o_last, "last"), tr),
                                        odf.at(odf.input(o_s, "s_row"), tr), odf.at(zt, tr),
                                        odf.at(loss, tr)),
                          o=self.o)
        m.d.comb += out_accept.eq(h_v & can)
        return m
