"""Pipelined IEEE 754 binary32 square root, ``r = sqrt(a)``, one operation per cycle.

Algorithm (radix-2 restoring digit-by-digit square root, fully unrolled):

1. Unpack and normalize: ``a = ma * 2**ea``, ``ma`` in ``[2**23, 2**24)`` (subnormals
   normalized). Make the exponent even: ``M = 2 * ma``, ``e2 = ea - 1`` when ``ea`` is odd,
   else ``M = ma``, ``e2 = ea``.
2. ``X = M * 2**(2n - 26)`` (``2n`` bits, ``n = config.sqrt_root_bits >= 26``). Compute
   ``S = floor(sqrt(X))`` two radicand bits per step: ``R = 4R + next pair``; ``T = 4S + 1``;
   if ``R >= T``: ``R -= T``, ``S = 2S + 1``, else ``S = 2S``. ``config.sqrt_bits_per_stage``
   steps per pipeline register, computed in pairs with both outcomes of the first step in
   parallel (see the comment in :meth:`FP32Sqrt.elaborate`). ``S`` has 25 or 26 significant
   bits (24 + guard + spare), and ``R = X - S**2`` is the exact remainder. After ``k`` steps
   ``R <= 2 S < 2**(k+1)``, so the remainder of step ``k`` is ``k + 1`` bits wide and each
   step's arithmetic is sized from it (no bit that is 0 for every operand). Stage 0 registers
   the normalised significand, the exponent without the normalising shift and the parity;
   the first recurrence stage forms ``M`` and completes the exponent.
3. ``sqrt(a) = (S + f) * 2**(e2/2 - n + 13)`` with ``f != 0`` exactly when ``R != 0`` (the
   sticky bit), rounded to nearest even by the staged rounding of :mod:`hdl.fp32.round`.
   ``S``'s leading one is in bit ``n - 1`` exactly when ``M >= 2**24`` (odd ``ea``), else in
   bit ``n - 2``, so the exponent plan (:func:`~hdl.fp32.round.round_plan_top2`) is chosen in
   the second recurrence stage (the first completes the exponent: stage 0 leaves the
   normalising shift out of it, to keep its path short); after the recurrence one stage normalises ``S`` by at most
   one bit and prepares the rounding frame (:func:`~hdl.fp32.round.round_prepare`), the last
   rounds (:func:`~hdl.fp32.round.round_finish`) and selects specials. The result is never
   subnormal nor overflows, and ties cannot happen.

Golden model: numpy ``float32`` square root (:class:`sim.model.fp32_exp.FP32Sqrt`).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed

from ..registry import Block
from .div import StallPipeline, round_and_output
from .divsqrt_config import FP32DivSqrtConfig
from .round import round_plan_select, round_plan_top2
from .unit import FP32StreamUnit
from .unpack import QNAN, special_top, unpack_fp32, unpack_fp32_staged

__all__ = ["FP32Sqrt"]


class FP32Sqrt(FP32StreamUnit):
    """IEEE 754 binary32 square root, round-to-nearest-even, fully pipelined.

    Bit-exact with ``numpy.sqrt`` on ``float32`` for every non-NaN result: exact for
    subnormal inputs, ``sqrt(+0) = +0``, ``sqrt(-0) = -0``, ``sqrt(+Inf) = +Inf``. A negative
    non-zero operand (including ``-Inf``) or a NaN gives the canonical quiet NaN
    ``0x7FC00000`` (``hdl.fp32.unpack.QNAN``).

    Parameters
    ----------
    config : FP32DivSqrtConfig
        ``sqrt_bits_per_stage`` sets the number of recurrence stages.

    Attributes
    ----------
    latency : int
        ``config.sqrt_latency`` = 1 (unpack) + ``config.sqrt_stages`` + 2 (round: prepare,
        finish), in cycles from an accepted operand to its result (no stall). One operation
        per cycle.

    Members
    -------
    i : In(stream.Signature(FP32))
        Operands ``a``.
    o : Out(stream.Signature(FP32))
        Results ``sqrt(a)``, in input order. Whole-pipeline stall while ``o.valid & ~o.ready``;
        ``i.ready = ~o.valid | o.ready``.
    """

    CONFIG = FP32DivSqrtConfig
    LATENCY_ATTR = "sqrt_latency"

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        n = cfg.sqrt_root_bits
        bps = cfg.sqrt_bits_per_stage
        shift = 2 * n - 26                     # X = M << shift, 2n bits
        rw = n + 3                             # remainder width: R < 2**(n+1) after a step

        def rwidth(k):
            """Width of the remainder after ``k`` steps: ``R_k <= 2 S_k < 2**(k+1)``, so no
            remainder register or wire holds a bit that is 0 for every operand; each step's
            arithmetic is sized from the width of the remainder going in."""
            return min(rw, k + 1)

        en = self.stall_enable(m)
        p = StallPipeline(m, en)

        # --- stage 0: unpack, normalize, even exponent, classify -----------------------------
        in_valid = self.i.valid
        if cfg.lzc_stage:       # the leading-zero count registered before the shift
            in_valid = p.valid(in_valid, "u_valid")
            a = unpack_fp32_staged(m, self.i.payload.as_value(), name="sqrt_a", reg=p.reg)
        else:
            a = unpack_fp32(m, self.i.payload.as_value(), name="sqrt_a", normalize=True)
        odd = Signal(name="odd_exp")
        m.d.comb += odd.eq(a.exp_raw[0] ^ a.lz[0])       # a.exp = a.exp_raw - a.lz
        nan = a.nan | (a.sign & ~a.zero)
        inf = a.inf & ~a.sign
        special_val = Signal(32, name="special_val")
        m.d.comb += special_val.eq(Mux(nan, QNAN,
                                       Cat(Const(0, 23), Mux(inf, 0xFF, 0), a.sign)))

        valid = p.valid(in_valid, "s0_valid")
        sig = p.reg(a.sig, "s0_sig")        # M = sig << odd, formed in stage st0
        # (a.exp - odd) / 2 - (n - 13), completed in stage st0 (the shift lz is subtracted there)
        exp = p.reg(a.exp_raw - 2 * (n - 13), "s0_exp_raw", signed(11))
        lz = p.reg(a.lz, "s0_lz")
        top = p.reg(odd, "s0_odd")          # S's leading one is in bit n-1 (else n-2)
        radicand = Signal(25, name="even_mant")
        m.d.comb += radicand.eq(Mux(top, sig << 1, sig))
        sgn = p.reg(a.sign, "s0_sign")
        special = p.reg(nan | inf | a.zero, "s0_special")
        spec_val = p.reg(special_top(special_val), "s0_special_val")
        rem = None
        root = None

        def xbit(i):
            """Bit ``i`` of ``X = M << shift`` (M is 25 bits; bit 2n-1 of X is 0)."""
            j = i - shift
            return radicand[j] if 0 <= j < 25 else Const(0, 1)

        # --- recurrence stages ---------------------------------------------------------------
        for s in range(cfg.sqrt_stages):
            r = Const(0, rwidth(0)) if rem is None else rem
            q = Const(0, 1) if root is None else root
            k = 0
            while k < bps:
                step = s * bps + k
                pair = Cat(xbit(2 * n - 2 - 2 * step), xbit(2 * n - 1 - 2 * step))
                rwk = len(r)                       # the remainder going in, R < 2**rwk
                assert rwk == rwidth(step)
                if bps - k >= 2:
                    # Two steps at once, both outcomes of the first in parallel (R, S, radicand
                    # pairs p0, p1; Y = 16R + 4 p0 + p1):
                    #   DA = 4R + p0 - (4S + 1)              g0 = DA >= 0
                    #   DB = Y - (8S + 1)                    g1 if not g0
                    #   DC = 4 DA + p1 - (8S + 5)            g1 if g0 (chained after DA)
                    # new R: g0 ? (g1 ? DC : 4 DA + p1) : (g1 ? DB : Y); new S = 4S + 2 g0 + g1.
                    pair1 = Cat(xbit(2 * n - 4 - 2 * step), xbit(2 * n - 3 - 2 * step))
                    nr = Signal(rwidth(step + 2), name=f"st{s}_rem{step}")
                    da = Signal(signed(rwk + 3), name=f"st{s}_da{step}")
                    db = Signal(signed(rwk + 5), name=f"st{s}_db{step}")
                    dc = Signal(signed(rwk + 5), name=f"st{s}_dc{step}")
                    y = Signal(rwk + 4, name=f"st{s}_y{step}")
                    g0 = Signal(name=f"st{s}_q{step}")
                    g1 = Signal(name=f"st{s}_q{step + 1}")
                    m.d.comb += [
                        y.eq(Cat(pair1, pair, r)),
                        da.eq(Cat(pair, r) - Cat(Const(1, 2), q)),
                        db.eq(y - Cat(Const(1, 3), q)),
                        dc.eq(Cat(pair1, da[:rwk + 2]) - Cat(Const(0b101, 3), q)),
                        g0.eq(~da[-1]),
                        g1.eq(Mux(g0, ~dc[-1], ~db[-1])),
                        # g1 (from the end of the DC chain) is the latest signal: last mux
                        nr.eq(Mux(g1, Mux(g0, dc, db), Mux(g0, Cat(pair1, da), y))),
                    ]
                    q = Cat(g1, g0, q)
                    k += 2
                else:
                    nr = Signal(rwidth(step + 1), name=f"st{s}_rem{step}")
                    shifted = Signal(rwk + 2, name=f"st{s}_rin{step}")
                    trial = Signal(len(q) + 2, name=f"st{s}_trial{step}")
                    ge = Signal(name=f"st{s}_q{step}")
                    delta = Signal(signed(rwk + 3), name=f"st{s}_delta{step}")
                    m.d.comb += [
                        shifted.eq(Cat(pair, r)),            # 4R + pair
                        trial.eq(Cat(Const(1, 2), q)),        # 4S + 1
                        delta.eq(shifted - trial),           # one carry chain: ge is its sign
                        ge.eq(~delta[-1]),
                        # not ge: 4R + pair < 4S + 1 < 2**(step + 2), so it fits nr too
                        nr.eq(Mux(ge, delta[:len(nr)], shifted[:len(nr)])),
                    ]
                    q = Cat(ge, q)
                    k += 1
                r = nr
            # drop the leading constant-zero bit of the first stage's seed
            q = q[:(s + 1) * bps]
            if s == 0:
                exp = p.reg((exp - lz - top) >> 1, "st0_exp", signed(10))   # exact: even
                top = p.reg(top, "st0_odd")
            elif s == 1:
                # S's leading one: bit n-1 iff M >= 2**24 (odd exponent), else bit n-2
                plans = round_plan_top2(m, exp=exp, width=n, name="sqrt_rnd")
                plan = round_plan_select(top, plans.top, plans.low)
            valid = p.valid(valid, f"st{s}_valid")
            rem = p.reg(r, f"st{s}_rem")
            root = p.reg(q, f"st{s}_root")
            still_needed = 2 * (s + 1) * bps < 2 * n - shift    # radicand bits left to read
            if still_needed:
                radicand = p.reg(radicand, f"st{s}_mant")
            if s >= 1:
                plan = p.reg_plan(plan, f"st{s}_plan")
            sgn = p.reg(sgn, f"st{s}_sign")
            special = p.reg(special, f"st{s}_special")
            spec_val = p.reg(spec_val, f"st{s}_special_val")

        # --- round (normalize, guard, sticky) | nearest-even increment, specials, output -----
        assert len(root) == n
        round_and_output(m, p, self.o, valid=valid, q=root, rem=rem, plan=plan, sgn=sgn,
                         special=special, spec_val=spec_val, name="sqrt_rnd")
        return m


def _params(preset: str) -> dict:
    cfg = FP32DivSqrtConfig.preset(preset)
    return {**cfg.to_dict(), "latency": cfg.sqrt_latency, "stages": cfg.sqrt_stages,
            "root_bits": cfg.sqrt_root_bits, "in_fields": [["a", 32]],
            "out_fields": [["r", 32]], "ops_per_cycle": 1}


TESSERA_BLOCKS = [
    Block("fp32_sqrt", build=lambda preset: FP32Sqrt(config=FP32DivSqrtConfig.preset(preset)),
          params=_params),
]
