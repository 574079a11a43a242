"""Pipelined IEEE 754 binary32 divider, ``r = a / b``, one operation per cycle.

Algorithm (radix-2 restoring digit recurrence, fully unrolled):

1. Unpack both operands; normalize subnormal significands (leading-zero count and shift) so
   that ``a = ma * 2**ea`` and ``b = mb * 2**eb`` with ``ma, mb`` in ``[2**23, 2**24)``.
   Special operands (NaN, Inf, zero) select a precomputed result that rides along.
2. ``Q = floor(ma * 2**K / mb)`` with ``K + 1 = config.div_quotient_bits >= 26`` quotient
   bits: starting from ``R = ma``, each step sets ``q = (R >= mb)``, ``R -= q * mb``,
   ``R *= 2``. ``config.div_bits_per_stage`` steps per pipeline register, computed in pairs
   with both outcomes of the first step in parallel (``R - d``, ``2R - d`` and ``2(R - d) - d``,
   the last chained after the first: about one carry chain per pair). ``Q`` has 25 or 26
   significant bits (``ma < mb`` or not): 24 result bits and at least one guard bit. Stage 0
   leaves the normalising shifts out of the exponent; the first recurrence stage subtracts them.
3. ``a / b = (Q + f) * 2**(ea - eb - K)`` with ``0 <= f < 1`` and ``f != 0`` exactly when the
   final remainder is non-zero (the sticky bit). The staged rounding of
   :mod:`hdl.fp32.round` rounds to nearest even with exact subnormals and overflow to Inf
   (IEEE-exact): the first recurrence stage completes the exponent (stage 0 leaves the
   normalising shifts out of it, to keep its path short), the second computes the exponent
   plans for both positions of ``Q``'s leading one (:func:`~hdl.fp32.round.round_plan_top2`)
   and selects one with ``Q``'s first bit (``ma >= mb``, known after the first); after the
   recurrence
   one stage normalises ``Q`` by at most one bit and prepares the rounding frame
   (:func:`~hdl.fp32.round.round_prepare`, sticky = remainder != 0), the last one rounds
   (:func:`~hdl.fp32.round.round_finish`) and selects the special-case result.

Golden model: numpy ``float32`` division (:class:`sim.model.fp32_exp.FP32Div`).
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data

from ..formats import FP32
from ..lib.dspmul import operand_slices, registered_partial_products
from ..registry import Block
from .divsqrt_config import FP32DivSqrtConfig
from .round import round_finish, round_plan_select, round_plan_top2, round_prepare
from .unit import FP32StreamUnit
from .unpack import QNAN, special_top, special_word, unpack_fp32, unpack_fp32_staged

__all__ = ["FP32DivIn", "FP32Div", "StallPipeline"]


class FP32DivIn(data.Struct):
    """One operation of :class:`FP32Div`: dividend ``a`` (bits 0..31), divisor ``b`` (32..63)."""

    a: FP32
    b: FP32


# ----------------------------------------------------------------------------------------------
# Helpers shared by the divide, square root and exp units
# ----------------------------------------------------------------------------------------------

class StallPipeline:
    """Stage registers of a pipeline that stalls as a whole.

    Parameters
    ----------
    m : Module
    en : Value
        Advance enable (``~o.valid | o.ready``).
    """

    def __init__(self, m, en):
        self.m = m
        self.en = en
        self._loads = {}        # id(register) -> (register, the value it loads)

    def reg(self, value, name: str, shape=None) -> Signal:
        """A data register (no reset) loaded with ``value`` when the pipeline advances."""
        if shape is None:
            shape = value.shape() if hasattr(value, "shape") else Shape.cast(value)
        sig = Signal(shape, name=name, reset_less=True)
        self.m.d.sync += sig.eq(Mux(self.en, value, sig))
        self._loads[id(sig)] = (sig, value)
        return sig

    def _load_of(self, x):
        """The value register ``x`` of :meth:`reg` loads, cast to its shape (a constant: the
        constant); ``None`` for anything else."""
        if isinstance(x, int):
            return x
        reg, value = self._loads.get(id(x), (None, None))
        if reg is x:
            nxt = Signal(x.shape(), name=f"{x.name}_next")
            self.m.d.comb += nxt.eq(value)
            return nxt
        return None

    def valid(self, prev, name: str) -> Signal:
        """A valid bit (reset to 0) that follows ``prev`` when the pipeline advances."""
        sig = Signal(name=name)
        with self.m.If(self.en):
            self.m.d.sync += sig.eq(prev)
        return sig

    def partial_products(self, a, b, name: str) -> list:
        """First stage of a pipelined product ``a * b``: the partial products of DSP-sized
        operand slices, registered (``{name}_pp_{i}{j}``).
        :func:`~hdl.lib.dspmul.sum_products` of the returned
        ``[(shift, register)]`` is the exact product, for a later stage.

        ``a`` and ``b`` are Values (signed or unsigned) or non-negative Python ints. Each is cut
        into 17-bit unsigned low slices and a top slice of at most 18 bits (signed when the
        operand is): every slice product fits one ECP5 ``MULT18X18D``, so this stage holds
        only the DSPs and their output registers. Give the DSPs registered operands (whose
        only other load is a pipeline copy): ECP5 DSPs sit in fixed rows, and the routes to and
        from them take a large part of a 10 ns cycle. When both operands are registers of
        :meth:`reg` (or constants), each slice product is a
        :class:`~hdl.lib.dspmul.RegisteredMul` fed with the values those registers load: the
        operand registers (a copy of them) and the product registers are the DSP block's own
        on an ECP5, and no route to or from the multiplier is in the cycle it computes.
        """
        la, lb = self._load_of(a), self._load_of(b)
        if la is not None and lb is not None:
            return registered_partial_products(self.m, la, lb, ce_in=self.en,
                                               ce_out=self.en, name=f"{name}_pp")
        out = []
        for i, (oa, va) in enumerate(operand_slices(a)):
            for j, (ob, vb) in enumerate(operand_slices(b)):
                out.append((oa + ob, self.reg(va * vb, f"{name}_pp_{i}{j}")))
        return out

    def reg_plan(self, plan, name: str) -> SimpleNamespace:
        """Registers of a rounding plan (``shift``, ``base``, ``ovf`` of
        :func:`hdl.fp32.round.round_plan`), named ``{name}_shift`` etc."""
        return SimpleNamespace(**{k: self.reg(getattr(plan, k), f"{name}_{k}")
                                  for k in ("shift", "base", "ovf")})



def round_and_output(m, p, o, *, valid, q, rem, plan, sgn, special, spec_val, name: str):
    """The common tail of the divide and square-root pipelines (two stages, then ``o``).

    ``q`` holds the quotient/root bits with its leading one in the top or next bit, ``rem`` the
    final remainder (non-zero = sticky). Stage ``rnd``: one-bit normalize, guard and sticky,
    :func:`round_prepare` with the ``plan`` chosen early; stage ``out``: nearest-even increment
    and packing (:func:`round_finish`), special-value override, the output register.
    """
    norm = Signal(len(q), name="rnd_norm")
    sticky = Signal(name="rnd_sticky")
    m.d.comb += [
        norm.eq(Mux(q[-1], q, q << 1)),
        sticky.eq(rem.any()),
    ]
    r = round_prepare(m, norm=norm, plan=plan, sticky=sticky, name=name)
    valid = p.valid(valid, "rnd_valid")
    frame = p.reg(r.frame, "rnd_frame")
    base = p.reg(r.base, "rnd_base")
    ovf = p.reg(r.ovf, "rnd_ovf")
    sgn = p.reg(sgn, "rnd_sign")
    special = p.reg(special, "rnd_special")
    spec_val = p.reg(spec_val, "rnd_special_val")

    rounded = round_finish(m, sign=sgn, frame=frame, base=base, ovf=ovf, name=name)
    result = Mux(special, special_word(spec_val), rounded)
    out_valid = p.valid(valid, "out_valid")
    out = p.reg(result, "out_r", unsigned(32))
    m.d.comb += [
        o.valid.eq(out_valid),
        o.payload.eq(out),
    ]


class FP32Div(FP32StreamUnit):
    """IEEE 754 binary32 divide, round-to-nearest-even, fully pipelined.

    Bit-exact with numpy ``float32`` division for every non-NaN result: exact subnormal inputs
    and outputs (no flush), overflow to ``±Inf``, ``x / ±0 = ±Inf`` for ``x != 0``, ``±0 / x =
    ±0``, ``x / ±Inf = ±0``. ``0 / 0``, ``Inf / Inf`` and any NaN operand give the canonical
    quiet NaN ``0x7FC00000`` (``hdl.fp32.unpack.QNAN``).

    Parameters
    ----------
    config : FP32DivSqrtConfig
        ``div_bits_per_stage`` sets the number of recurrence stages.

    Attributes
    ----------
    latency : int
        ``config.div_latency`` = 1 (unpack) + ``config.div_stages`` + 2 (round: prepare,
        finish): a result leaves ``latency`` cycles after its operands were accepted when the
        output is not stalled. One operation per cycle.

    Members
    -------
    i : In(stream.Signature(FP32DivIn))
        Operands: dividend ``a`` (bits 0..31), divisor ``b`` (bits 32..63), FP32.
    o : Out(stream.Signature(FP32))
        Quotients, in input order. The pipeline stalls as a whole while ``o.valid & ~o.ready``;
        ``i.ready = ~o.valid | o.ready``.
    """

    CONFIG = FP32DivSqrtConfig
    IN = FP32DivIn
    LATENCY_ATTR = "div_latency"

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        nbits = cfg.div_quotient_bits
        bps = cfg.div_bits_per_stage

        en = self.stall_enable(m)
        p = StallPipeline(m, en)

        # --- stage 0: unpack, normalize, classify ------------------------------------------
        in_valid = self.i.valid
        if cfg.lzc_stage:       # the leading-zero counts registered before the shifts
            in_valid = p.valid(in_valid, "u_valid")
            a = unpack_fp32_staged(m, self.i.payload.a.as_value(), name="div_a", reg=p.reg)
            b = unpack_fp32_staged(m, self.i.payload.b.as_value(), name="div_b", reg=p.reg)
        else:
            a = unpack_fp32(m, self.i.payload.a.as_value(), name="div_a", normalize=True)
            b = unpack_fp32(m, self.i.payload.b.as_value(), name="div_b", normalize=True)
        sign = a.sign ^ b.sign
        nan = a.nan | b.nan | (a.zero & b.zero) | (a.inf & b.inf)
        inf = (a.inf & ~b.inf) | (b.zero & ~a.zero)
        zero = (a.zero & ~b.zero) | (b.inf & ~a.inf)
        special_val = Signal(32, name="special_val")
        m.d.comb += special_val.eq(Mux(nan, QNAN,
                                       Cat(Const(0, 23), Mux(inf, 0xFF, 0), sign)))

        valid = p.valid(in_valid, "s0_valid")
        rem = p.reg(Cat(a.sig, Const(0, 1)), "s0_rem")               # 25 bits
        div = p.reg(b.sig, "s0_div")
        # exponent of Q's LSB without the normalising shifts (subtracted in stage st0)
        exp = p.reg(a.exp_raw - b.exp_raw - (nbits - 1), "s0_exp_raw", signed(11))
        lz_a = p.reg(a.lz, "s0_lz_a")
        lz_b = p.reg(b.lz, "s0_lz_b")
        sgn = p.reg(sign, "s0_sign")
        special = p.reg(nan | inf | zero, "s0_special")
        spec_val = p.reg(special_top(special_val), "s0_special_val")
        quot = None

        # --- recurrence stages ---------------------------------------------------------------
        # Stage st0 completes the exponent of Q's LSB. Q = quot has its leading one in bit
        # nbits-1 (ma >= mb) or nbits-2: stage st1 computes the rounding plans for both and
        # keeps the one that Q's first bit (known after st0) selects.
        assert cfg.div_stages >= 2
        plan = None
        for s in range(cfg.div_stages):
            r = rem
            bits = []
            k = 0
            while k < bps:
                step = s * bps + k
                if bps - k >= 2:
                    # Two steps at once, both outcomes of the first in parallel:
                    # A = R - d (q0 = A >= 0), B = 2R - d (q1 if not q0), C = 2A - d (q1 if q0).
                    # C is chained after A bit by bit (no select in between), so the stage is
                    # about one carry chain and two mux levels instead of two chains.
                    a_ = Signal(signed(26), name=f"st{s}_a{step}")
                    b_ = Signal(signed(27), name=f"st{s}_b{step}")
                    c_ = Signal(signed(28), name=f"st{s}_c{step}")
                    q0 = Signal(name=f"st{s}_q{step}")
                    q1 = Signal(name=f"st{s}_q{step + 1}")
                    sel = Signal(24, name=f"st{s}_rem{step + 1}")    # < d < 2**24
                    m.d.comb += [
                        a_.eq(r - div),
                        b_.eq((r << 1) - div),
                        c_.eq((a_ << 1) - div),
                        q0.eq(~a_[-1]),
                        q1.eq(Mux(q0, ~c_[-1], ~b_[-1])),
                        # q1 (from the end of the C chain) is the latest signal: last mux
                        sel.eq(Mux(q1, Mux(q0, c_[:24], b_[:24]),
                                   Mux(q0, (a_ << 1)[:24], (r << 1)[:24]))),
                    ]
                    bits += [q0, q1]
                    k += 2
                else:
                    ge = Signal(name=f"st{s}_q{step}")
                    trial = Signal(signed(26), name=f"st{s}_trial{step}")
                    sel = Signal(25, name=f"st{s}_rem{step}")
                    m.d.comb += [
                        trial.eq(r - div),           # one carry chain: ge is its sign
                        ge.eq(~trial[-1]),
                        sel.eq(Mux(ge, trial[:25], r)),
                    ]
                    bits.append(ge)
                    k += 1
                nxt = Signal(25, name=f"st{s}_rsh{step}")
                m.d.comb += nxt.eq(sel << 1)             # sel < div < 2**24: no bit lost
                r = nxt
            new_bits = Cat(*reversed(bits))              # first quotient bit is the MSB
            q_next = new_bits if quot is None else Cat(new_bits, quot)
            if s == 0:
                exp = p.reg(exp - lz_a + lz_b, "st0_exp", signed(11))
            elif s == 1:
                plans = round_plan_top2(m, exp=exp, width=nbits, name="div_rnd")
                plan = round_plan_select(quot[-1], plans.top, plans.low)
            valid = p.valid(valid, f"st{s}_valid")
            rem = p.reg(r, f"st{s}_rem")
            quot = p.reg(q_next, f"st{s}_quot")
            if s < cfg.div_stages - 1:
                div = p.reg(div, f"st{s}_div")
            if s >= 1:
                plan = p.reg_plan(plan, f"st{s}_plan")
            sgn = p.reg(sgn, f"st{s}_sign")
            special = p.reg(special, f"st{s}_special")
            spec_val = p.reg(spec_val, f"st{s}_special_val")

        # --- round (normalize, guard, sticky) | nearest-even increment, specials, output -----
        assert len(quot) == nbits
        round_and_output(m, p, self.o, valid=valid, q=quot, rem=rem, plan=plan, sgn=sgn,
                         special=special, spec_val=spec_val, name="div_rnd")
        return m


def _params(preset: str) -> dict:
    cfg = FP32DivSqrtConfig.preset(preset)
    return {**cfg.to_dict(), "latency": cfg.div_latency, "stages": cfg.div_stages,
            "quotient_bits": cfg.div_quotient_bits, "in_fields": [["a", 32], ["b", 32]],
            "out_fields": [["r", 32]], "ops_per_cycle": 1}


TESSERA_BLOCKS = [
    Block("fp32_div", build=lambda preset: FP32Div(config=FP32DivSqrtConfig.preset(preset)),
          params=_params),
]
