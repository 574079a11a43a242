"""``RegisteredMul``: a product with a register before and after the multiplier,
both inside the DSP block on an ECP5 (``MULT18X18D`` with ``REG_INPUTA/B`` and ``REG_OUTPUT``).

yosys's ``synth_ecp5`` maps ``a * b`` to a ``MULT18X18D`` with every register bypassed, so a
product between two fabric registers is a path from a register to the DSP, through the
multiplier and back (4.78 + 3.93 + 5.32 ns routed in the S = 4 FPGA core, docs/toolchain.md).
Built for an ECP5 (``platform.family == "ecp5"``: Amaranth's Lattice platforms and
:func:`hdl.gen.target_platform`) this block instantiates the DSP with its registers on, which
the pinned nextpnr-ecp5 times as register-to-register paths; elsewhere (the Amaranth
simulator, Verilator, other FPGAs) it is the same two registers and the product in Amaranth.
"""
from __future__ import annotations

from amaranth.hdl import (ClockSignal, Const, Instance, Module, Shape, Signal, Value, signed,
                          unsigned)
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import check_int
from .mustuse import used_if_rejected

__all__ = ["RegisteredMul", "DSP_OPERAND_BITS", "targets_ecp5", "operand_slices",
           "registered_product", "registered_partial_products", "sum_products"]

#: The widest unsigned operand one ``MULT18X18D`` multiplies (``SIGNEDA = SIGNEDB = 0``).
DSP_OPERAND_BITS = 18


def targets_ecp5(platform) -> bool:
    """Whether ``platform`` builds for a Lattice ECP5 (its ``family`` attribute)."""
    return getattr(platform, "family", None) == "ecp5"


class RegisteredMul(wiring.Component):
    """``p = a * b`` with registered operands and a registered product.

    Cycle ``t`` with ``ce_in`` loads ``a`` and ``b``; cycle ``t + 1`` with ``ce_out`` loads
    their product into ``p``. With both enables high, ``p`` is the product of the operands of
    two cycles before (:attr:`latency`). Neither register is reset (data; a valid bit travels
    beside them in the user's pipeline).

    Parameters
    ----------
    a_width, b_width : int
        Operand widths, 1 .. :data:`DSP_OPERAND_BITS` (one DSP block).
    a_signed, b_signed : bool
        Two's complement operands (default unsigned); ``p`` has the shape of Amaranth's
        ``a * b``.

    Attributes
    ----------
    latency : int
        2: the operand register and the product register.

    Members
    -------
    a : In(Shape(a_width, a_signed))
    b : In(Shape(b_width, b_signed))
    ce_in : In(1)
        Load the operand registers.
    ce_out : In(1)
        Load the product register.
    p : Out(a_width + b_width, signed if either operand is)
        The registered product.
    """

    latency = 2

    def __init__(self, a_width: int, b_width: int, *, a_signed: bool = False,
                 b_signed: bool = False):
        with used_if_rejected(self):
            check_int("RegisteredMul", "a_width", a_width, lo=1, hi=DSP_OPERAND_BITS)
            check_int("RegisteredMul", "b_width", b_width, lo=1, hi=DSP_OPERAND_BITS)
            for name, flag in (("a_signed", a_signed), ("b_signed", b_signed)):
                if not isinstance(flag, bool):
                    raise TypeError(f"RegisteredMul.{name} must be a bool, not "
                                    f"{type(flag).__name__} {flag!r}")
        self.a_shape = Shape(a_width, a_signed)
        self.b_shape = Shape(b_width, b_signed)
        p_shape = (Const(0, self.a_shape) * Const(0, self.b_shape)).shape()
        super().__init__({"a": In(self.a_shape), "b": In(self.b_shape), "ce_in": In(1),
                          "ce_out": In(1), "p": Out(p_shape)})

    def elaborate(self, platform):
        m = Module()
        if targets_ecp5(platform):
            self._ecp5(m)
            return m
        a_q = Signal(self.a_shape, name="a_q", reset_less=True)
        b_q = Signal(self.b_shape, name="b_q", reset_less=True)
        p_q = Signal(self.p.shape(), name="p_q", reset_less=True)
        with m.If(self.ce_in):
            m.d.sync += [a_q.eq(self.a), b_q.eq(self.b)]
        with m.If(self.ce_out):
            m.d.sync += p_q.eq(a_q * b_q)
        m.d.comb += self.p.eq(p_q)
        return m

    def _ecp5(self, m):
        """``MULT18X18D``: inputs A/B (extended to 18 bits by their signedness, SIGNEDA/B)
        registered on CLK0 with CE0, the product on CLK0 with CE1, the resets tied off (RST0
        low, GSR disabled), no pipeline register."""
        n = DSP_OPERAND_BITS
        a = Signal(signed(n) if self.a_shape.signed else n, name="dsp_a")
        b = Signal(signed(n) if self.b_shape.signed else n, name="dsp_b")
        prod = Signal(2 * n, name="dsp_p")
        m.d.comb += [a.eq(self.a), b.eq(self.b), self.p.eq(prod[:len(self.p)])]
        zero = Const(0, 1)
        ports = {f"i_A{k}": a[k] for k in range(n)}
        ports |= {f"i_B{k}": b[k] for k in range(n)}
        ports |= {f"i_C{k}": zero for k in range(n)}
        ports |= {f"o_P{k}": prod[k] for k in range(2 * n)}
        ports |= {"i_SIGNEDA": Const(self.a_shape.signed, 1),
                  "i_SIGNEDB": Const(self.b_shape.signed, 1),
                  "i_SOURCEA": zero, "i_SOURCEB": zero,
                  "i_CLK0": ClockSignal("sync"), "i_CLK1": zero, "i_CLK2": zero,
                  "i_CLK3": zero, "i_CE0": self.ce_in, "i_CE1": self.ce_out,
                  "i_CE2": zero, "i_CE3": zero,
                  "i_RST0": zero, "i_RST1": zero, "i_RST2": zero, "i_RST3": zero}
        m.submodules.dsp = Instance(
            "MULT18X18D",
            p_REG_INPUTA_CLK="CLK0", p_REG_INPUTA_CE="CE0", p_REG_INPUTA_RST="RST0",
            p_REG_INPUTB_CLK="CLK0", p_REG_INPUTB_CE="CE0", p_REG_INPUTB_RST="RST0",
            p_REG_INPUTC_CLK="NONE", p_REG_PIPELINE_CLK="NONE",
            p_REG_OUTPUT_CLK="CLK0", p_REG_OUTPUT_CE="CE1", p_REG_OUTPUT_RST="RST0",
            p_GSR="DISABLED", p_RESETMODE="SYNC", p_MULT_BYPASS="DISABLED",
            p_SOURCEB_MODE="B_SHIFT", p_CAS_MATCH_REG="FALSE",
            p_CLK0_DIV="ENABLED", p_CLK1_DIV="ENABLED", p_CLK2_DIV="ENABLED",
            p_CLK3_DIV="ENABLED", p_HIGHSPEED_CLK="NONE",
            **ports)


def operand_slices(x) -> list:
    """``[(offset, slice)]`` with ``x == sum(slice << offset)``: 17-bit unsigned low slices and a
    top slice of at most 18 bits, signed if ``x`` is: every product of two slices fits one
    ``MULT18X18D``. ``x`` is a Value or a non-negative Python int."""
    if isinstance(x, int):
        if x < 0:
            raise ValueError(f"constant multiplier must be non-negative, not {x}")
        x = Const(x, unsigned(max(1, x.bit_length())))
    x = Value.cast(x)
    top = 18 if x.shape().signed else 17
    out, off = [], 0
    while len(x) - off > top:
        out.append((off, x[off:off + 17]))
        off += 17
    rest = x[off:]
    out.append((off, rest.as_signed() if x.shape().signed else rest))
    return out


def registered_product(m, a, b, *, ce_in, ce_out, name: str) -> Value:
    """``a * b`` through a :class:`RegisteredMul` (submodule ``name`` of ``m``) sized and signed
    by the operands' shapes: its operand registers load ``a`` and ``b`` when ``ce_in``, its
    product register loads when ``ce_out``; returns the product register."""
    a, b = Value.cast(a), Value.cast(b)
    mul = m.submodules[name] = RegisteredMul(len(a), len(b), a_signed=a.shape().signed,
                                             b_signed=b.shape().signed)
    m.d.comb += [mul.a.eq(a), mul.b.eq(b), mul.ce_in.eq(ce_in), mul.ce_out.eq(ce_out)]
    return mul.p


def registered_partial_products(m, a, b, *, ce_in, ce_out, name: str) -> list:
    """``a * b`` as one :class:`RegisteredMul` per pair of :func:`operand_slices` (submodules
    ``{name}_{i}{j}`` of ``m``): the operand registers load the slices of ``a`` and ``b`` when
    ``ce_in``, the product registers load when ``ce_out``. Returns ``[(shift, product)]``,
    whose :func:`sum_products` is the exact product of the operands loaded two enabled
    steps before (latency :attr:`RegisteredMul.latency`)."""
    return [(oa + ob, registered_product(m, va, vb, ce_in=ce_in, ce_out=ce_out,
                                         name=f"{name}_{i}{j}"))
            for i, (oa, va) in enumerate(operand_slices(a))
            for j, (ob, vb) in enumerate(operand_slices(b))]


def sum_products(pps) -> Value:
    """The exact product from ``[(shift, partial product)]``
    (:func:`registered_partial_products`, :meth:`hdl.fp32.div.StallPipeline.partial_products`):
    the shifted sum."""
    total = None
    for shift, pp in pps:
        term = pp if shift == 0 else pp << shift
        total = term if total is None else total + term
    return total
