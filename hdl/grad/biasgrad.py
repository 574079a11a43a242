"""Bias gradient ``db = sum over the batch of dY`` (column sums, fixed order).

``dY`` streams in row-major (``rows x cols``). Column ``c`` accumulates in an FP32 scratchpad
word: ``acc = ((0 + dY[0,c]) + dY[1,c]) + ...`` (rows in order, one RNE add each; golden model
:func:`sim.model.grad.bias_grad`). Each element is a read-modify-write through the FP32 adder;
when a row is shorter than the adder loop (``cols < La + 2``) the input pauses ``La + 2 - cols``
cycles after each row so the next row reads the updated sum. Then ``db`` streams out.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..lib.dataflow import Dataflow, check_units, credit_fifo, unit_members, unit_ports
from ..lib.mustuse import used_if_rejected
from .config import GradConfig

__all__ = ["BiasGrad", "BG_CMD_LAYOUT", "BG_OUT_LAYOUT"]

BG_CMD_LAYOUT = data.StructLayout({"rows": 16, "cols": 17})
BG_OUT_LAYOUT = data.StructLayout({"r": 32, "last": 1})


class BiasGrad(wiring.Component):
    """Column sums of a ``rows x cols`` FP32 stream.

    Parameters
    ----------
    config : GradConfig
        ``max_cols`` sets the accumulator depth.
    fp32_config : FP32Config
    units : tuple of str
        Kinds of the operations that use units outside the component, in the order the
        datapath builds them (:class:`~hdl.lib.dataflow.UnitPort`; default none): each adds
        a ``unit_<kind><n>`` member. The vector unit of the FPGA build shares them
        (docs/vector.md).

    Attributes
    ----------
    latency : int
        Adder loop: an element accepted at ``t`` is in the accumulator at ``t + latency``.

    Members
    -------
    cmd : In(stream.Signature(BG_CMD_LAYOUT))
        ``rows`` (>= 1) and ``cols`` (1..max_cols) of the next batch; a command out of range is
        dropped and sets ``error``.
    dy : In(stream.Signature(32))
        ``dY`` row-major, FP32.
    db : Out(stream.Signature(BG_OUT_LAYOUT))
        ``db[0..cols-1]`` (FP32), ``last`` on the final column.
    error : Out(1)
        Sticky: an invalid command was dropped.
    """

    def __init__(self, *, config: GradConfig | None = None,
                 fp32_config: FP32Config | None = None, units: tuple = ()):
        self.config = config or GradConfig()
        self.fp32_config = fp32_config or FP32Config()
        with used_if_rejected(self):
            self.units = check_units("BiasGrad", units, {"add": 1})
        # the adder's latency, one cycle more on a unit outside (its operand register)
        self.add_latency = self.fp32_config.latency("fp32_add") + bool(self.units)
        self.latency = 1 + self.add_latency
        super().__init__({
            "cmd": In(stream.Signature(BG_CMD_LAYOUT)),
            "dy": In(stream.Signature(32)),
            "db": Out(stream.Signature(BG_OUT_LAYOUT)),
            "error": Out(1),
            **unit_members(self.units),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        la = self.add_latency
        m.submodules.acc = mem = Memory(shape=32, depth=cfg.max_cols, init=[])
        rp = mem.read_port()
        wp = mem.write_port()

        row = Signal(16, name="row")
        col = Signal(17, name="col")
        gap = Signal(range(la + 3), name="gap")
        drain = Signal(range(la + 4), name="drain")

        # Accumulate pipeline: accept (read addr) -> +1 (read data) -> add -> write.
        v1 = Signal(name="acc_v1")
        dy1 = Signal(32, name="acc_dy1")
        col1 = Signal(range(cfg.max_cols), name="acc_col1")
        first1 = Signal(name="acc_first1")
        df = Dataflow(m, v1, fp32_config=self.fp32_config, divsqrt_config=FP32DivSqrtConfig(),
                      prefix="bg", external=unit_ports(self, self.units))
        old = Signal(32, name="acc_old")
        m.d.comb += old.eq(Mux(first1, 0, rp.data))
        s = df.add(df.input(old, "old"), df.input(dy1, "dy"), name="sum")
        waddr = df.at(df.input(col1, "col"), s.t)
        m.d.comb += [wp.addr.eq(waddr), wp.data.eq(df.at(s, s.t)), wp.en.eq(df.valid_at(s.t))]
        df.check_external_used()
        m.d.sync += v1.eq(0)

        # Output: read acc -> FIFO (credits) -> db.
        out_v = Signal(name="out_v")
        out_last = Signal(name="out_last")
        out_accept = Signal(name="out_accept")
        can = credit_fifo(m, "ofifo", latency=1, accept=out_accept, done_valid=out_v,
                          done_data=Cat(rp.data, out_last), o=self.db)
        m.d.sync += [out_v.eq(out_accept)]

        # cols - 2, rows - 2, cols == 1 and a row's gap registered with the command, and
        # ``col == cols - 1`` / ``row == rows - 1`` as flags kept with ``col`` / ``row``: the
        # step behind ``dy.valid`` sets them from registers and an equality compare of the
        # counter (``col + 1 == cols - 1`` is ``col == cols - 2``) instead of
        # subtract-and-compare chains (in the S = 4 FPGA core at 47febd6 these counters were
        # ~80 of the vector unit's routed end points over 10 ns; the increment before the
        # compare was 10 LUT levels into ``row_last`` at S = 8 by the estimate)
        cols_m2 = Signal(signed(18), name="cols_m2")
        rows_m2 = Signal(signed(17), name="rows_m2")
        one_col = Signal(name="one_col")            # cols == 1
        row_gap = Signal.like(gap, name="row_gap")
        col_last = Signal(name="col_last")          # col == cols - 1
        row_last = Signal(name="row_last")          # row == rows - 1
        cmd = self.cmd.payload
        with m.FSM(name="bg"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                # the counters and the command's registers follow the payload in every idle
                # cycle (nothing reads them while idle), so their enable is the state, not
                # the command's checks (the size compares were eight LUT levels into the
                # enables of ~50 of them, 12.0 ns estimated at S = 4; 12.12 ns routed at
                # 339a669)
                m.d.sync += [row.eq(0), col.eq(0), gap.eq(0), cols_m2.eq(cmd.cols - 2),
                             rows_m2.eq(cmd.rows - 2), one_col.eq(cmd.cols == 1),
                             col_last.eq(cmd.cols == 1), row_last.eq(cmd.rows == 1),
                             row_gap.eq(Mux(cmd.cols < la + 2, la + 2 - cmd.cols, 0))]
                with m.If(self.cmd.valid):
                    with m.If((cmd.rows == 0) | (cmd.cols == 0) | (cmd.cols > cfg.max_cols)):
                        m.d.sync += self.error.eq(1)
                    with m.Else():
                        m.next = "ACC"
            with m.State("ACC"):
                m.d.comb += [self.dy.ready.eq(gap == 0), rp.addr.eq(col)]
                with m.If(gap != 0):
                    m.d.sync += gap.eq(gap - 1)
                with m.If(self.dy.valid & (gap == 0)):
                    m.d.sync += [v1.eq(1), dy1.eq(self.dy.payload), col1.eq(col),
                                 first1.eq(row == 0), col.eq(col + 1),
                                 col_last.eq(col == cols_m2)]
                    with m.If(col_last):
                        m.d.sync += [col.eq(0), col_last.eq(one_col), row.eq(row + 1),
                                     row_last.eq(row == rows_m2), gap.eq(row_gap)]
                        with m.If(row_last):
                            m.d.sync += drain.eq(la + 3)
                            m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += drain.eq(drain - 1)
                with m.If(drain == 0):
                    m.d.sync += col.eq(0)
                    m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += rp.addr.eq(col)
                with m.If(can):
                    m.d.comb += out_accept.eq(1)
                    m.d.sync += [col.eq(col + 1), out_last.eq(col_last),
                                 col_last.eq(col == cols_m2)]
                    with m.If(col_last):
                        m.next = "IDLE"
        return m
