"""One processing element of the in-place transposed systolic array."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..fmac_step import FMACDatapath, FMACStep, fmac_width_shape
from .config import BWD_DATA, BWD_WEIGHT, FWD, ArrayConfig

__all__ = ["elem_layout", "op_layout", "psum_layout", "width_shape", "PE"]


def width_shape(config: ArrayConfig):
    """A run-time mantissa width field (holds ``m`` itself): the fMAC's."""
    return fmac_width_shape(config.fmac)


def elem_layout(config: ArrayConfig) -> data.StructLayout:
    """A BFP element without its exponent: ``mag`` | ``sign`` (as :mod:`hdl.formats`)."""
    return data.StructLayout({"mag": unsigned(config.max_mantissa), "sign": 1})


def op_layout(config: ArrayConfig) -> data.StructLayout:
    """A streamed operand travelling through the array with its tags.

    ``bank`` selects the stationary weight bank (``FWD``/``BWD_DATA``); ``first``/``last`` mark
    the first and last beat of a ``BWD_WEIGHT`` batch tile; ``valid`` is 0 in bubbles.
    """
    return data.StructLayout({"mag": unsigned(config.max_mantissa), "sign": 1, "valid": 1,
                              "bank": 1, "first": 1, "last": 1})


def psum_layout(config: ArrayConfig) -> data.StructLayout:
    """An exact partial sum (two's complement, ``acc_bits``) and its valid bit."""
    return data.StructLayout({"value": signed(config.acc_bits), "valid": 1})


class PE(wiring.Component):
    """Processing element ``PE(k, n)``: holds ``W[k, n]`` (two banks) in every mode.

    All PEs of an array run in lockstep, so the chunk schedule is not the PE's: a
    :class:`hdl.fmac_step.FMACSchedule` per PE row drives the ``cmd`` of every PE in the row.
    ``cmd.go`` begins a beat in every PE in the same cycle; the PE's
    :class:`hdl.fmac_step.FMACDatapath` multiplies for ``B = ceil((m_a/2)(m_b/2)/lanes)``
    cycles (the next beat may start then) and raises ``done`` ``FMACDatapath.LATENCY`` cycles
    later; the partial sum is updated at the end of the ``done`` cycle. The flags of a product
    (``valid``, ``first``, ``last``) travel with it as the datapath's tag.

    * On ``cmd.go`` the operand registers shift (``h_reg <= h_in``, ``v_reg <= v_in``) and the
      core captures this PE's current operands:
      ``FWD``: ``h_reg`` (X) x ``W[h_reg.bank]``; ``BWD_DATA``: ``v_reg`` (dY) x
      ``W[v_reg.bank]``; ``BWD_WEIGHT``: ``h_reg`` (X) x ``v_reg`` (dY).
    * On ``done`` with ``sum = addend + product``: ``FWD``: ``ps <= ps_up + product``
      (partial sums flow down, along k); ``BWD_DATA``: ``ps <= ps_left + product`` (flow
      right, along n); ``BWD_WEIGHT`` (valid beats only): ``ps <= (first ? 0 : ps) + product``
      (the PE's own accumulator) and, on the tile's ``last`` beat, ``drain <= sum`` with
      ``drain.valid`` set for exactly one beat (the other accumulator buffer: the next tile
      accumulates in ``ps`` while the finished one leaves through ``drain``).
    * ``wl_en`` writes ``(wl_sign, wl_mag)`` into weight bank ``wl_bank`` (any cycle).

    Number format: operands and weights sign/magnitude integers (``max_mantissa`` bits);
    partial sums exact two's complement ``acc_bits`` integers (never overflow by
    construction: ``acc_bits = 2*max_mantissa + log2(S) + 1``).

    The core's own accumulator is not used: a systolic partial sum's addend comes from a
    neighbour, so the PE adds the core's ``product`` itself.

    Members
    -------
    cmd : In(FMACStep(config.fmac))
        The row schedule's step commands. Its widths are the core's ``a`` (streamed) and ``b``
        (weight, or dY in ``BWD_WEIGHT``) operands'.
    mode : In(2)
        ``FWD``, ``BWD_DATA`` or ``BWD_WEIGHT``; constant during a pass.
    h_in, v_in : In(op_layout)
        Operands from the left and upper neighbours (or the array's skew registers).
    h_out, v_out : Out(op_layout)
        This PE's operand registers (to the right and lower neighbours).
    ps_up, ps_left : In(psum_layout)
        Partial sums from the upper (``FWD``) and left (``BWD_DATA``) neighbours.
    ps_out : Out(psum_layout)
        This PE's partial sum / accumulator register.
    drain : Out(psum_layout)
        A finished ``BWD_WEIGHT`` tile result, ``valid`` for one beat.
    wl_en, wl_bank : In(1)
        Stationary-weight write strobe and bank.
    wl_sign : In(1), wl_mag : In(max_mantissa)
        The weight written.
    done : Out(1)
        The product is complete (``FMACDatapath.LATENCY`` cycles after the beat's last step).
    """

    def __init__(self, *, config: ArrayConfig, name: str = "pe"):
        if not isinstance(config, ArrayConfig):
            self._MustUse__silence = True        # no "never used" warning when rejected
            raise TypeError(f"PE.config must be an ArrayConfig, not {config!r}")
        self.config = config
        self._name = name
        mm = config.max_mantissa
        super().__init__({
            "cmd": In(FMACStep(config.fmac)),
            "mode": In(2),
            "h_in": In(op_layout(config)), "v_in": In(op_layout(config)),
            "h_out": Out(op_layout(config)), "v_out": Out(op_layout(config)),
            "ps_up": In(psum_layout(config)), "ps_left": In(psum_layout(config)),
            "ps_out": Out(psum_layout(config)),
            "drain": Out(psum_layout(config)),
            "wl_en": In(1), "wl_bank": In(1), "wl_sign": In(1), "wl_mag": In(mm),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        mm = cfg.max_mantissa
        nm = self._name
        core = m.submodules.fmac = FMACDatapath(config=cfg.fmac, tag_bits=3)
        wiring.connect(m, wiring.flipped(self.cmd), core.cmd)

        w_mag = [Signal(mm, name=f"{nm}_w{b}_mag") for b in range(2)]
        w_sign = [Signal(name=f"{nm}_w{b}_sign") for b in range(2)]
        with m.If(self.wl_en):
            for b in range(2):
                with m.If(self.wl_bank == b):
                    m.d.sync += [w_mag[b].eq(self.wl_mag), w_sign[b].eq(self.wl_sign)]

        h, v = self.h_out, self.v_out            # this PE's operand registers
        is_bwd_data = Signal(name=f"{nm}_is_bwd_data")
        is_bww = Signal(name=f"{nm}_is_bww")
        m.d.comb += [is_bwd_data.eq(self.mode == BWD_DATA), is_bww.eq(self.mode == BWD_WEIGHT)]

        # operand a: the streamed operand; b: the stationary weight of a's bank (or dY)
        a = Signal(op_layout(cfg), name=f"{nm}_a")
        m.d.comb += a.eq(Mux(is_bwd_data, v, h))
        wb_mag = Signal(mm, name=f"{nm}_wsel_mag")
        wb_sign = Signal(name=f"{nm}_wsel_sign")
        # the flags of a product travel with it through the datapath as its tag
        fl = data.StructLayout({"valid": 1, "first": 1, "last": 1})
        new = Signal(fl, name=f"{nm}_flags_new")
        cur = Signal(fl, name=f"{nm}_flags_done")
        m.d.comb += [
            wb_mag.eq(Mux(a.bank, w_mag[1], w_mag[0])),
            wb_sign.eq(Mux(a.bank, w_sign[1], w_sign[0])),
            core.a_sign.eq(a.sign), core.a_mag.eq(a.mag),
            core.b_sign.eq(Mux(is_bww, v.sign, wb_sign)),
            core.b_mag.eq(Mux(is_bww, v.mag, wb_mag)),
            new.valid.eq(a.valid), new.first.eq(a.first), new.last.eq(a.last),
            core.tag.eq(new), cur.eq(core.tag_out),
            self.done.eq(core.done),
        ]
        with m.If(self.cmd.go):
            m.d.sync += [h.eq(self.h_in), v.eq(self.v_in)]
        cur_valid, cur_first, cur_last = cur.valid, cur.first, cur.last

        addend = Signal(signed(cfg.acc_bits), name=f"{nm}_addend")
        total = Signal(signed(cfg.acc_bits), name=f"{nm}_sum")
        with m.Switch(self.mode):
            with m.Case(FWD):
                m.d.comb += addend.eq(self.ps_up.value)
            with m.Case(BWD_DATA):
                m.d.comb += addend.eq(self.ps_left.value)
            with m.Default():
                m.d.comb += addend.eq(Mux(cur_first, 0, self.ps_out.value))
        m.d.comb += total.eq(addend + core.product)

        with m.If(core.done):
            m.d.sync += self.drain.valid.eq(0)
            with m.If(is_bww):
                with m.If(cur_valid):
                    m.d.sync += self.ps_out.value.eq(total)
                    with m.If(cur_last):
                        m.d.sync += [self.drain.value.eq(total), self.drain.valid.eq(1)]
                m.d.sync += self.ps_out.valid.eq(0)
            with m.Else():
                m.d.sync += [self.ps_out.value.eq(total), self.ps_out.valid.eq(cur_valid)]
        return m
