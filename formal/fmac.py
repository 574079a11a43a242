"""Proof 1: the chunked fMAC core (``hdl.fmac.FMACCore``, docs/fmac.md) multiplies exactly, on
time, for every legal width pair.

Inputs are free every cycle (``AnySeq``: starts at any time, back to back or with gaps, any
signs, magnitudes and legal widths, ``clear``/``accumulate`` toggling). A shadow model in the
wrapper, written from docs/fmac.md and not from the DUT, records each accepted product's
expected value ``(-1)^(s_a ^ s_b) * (a mod 2^m_a) * (b mod 2^m_b)`` (one ``*``) and its beat
``B = ceil((m_a/2)(m_b/2) / lanes)``, and asserts every cycle:

* ``ready`` is 1 exactly when no product runs or the running one is in its last step (cycle
  ``t + B`` of a product started in cycle ``t``), ``busy`` exactly while one runs;
* ``done`` is 1 exactly in cycle ``t + B + 1``, and then ``product`` is the expected value.

Covers: a product completes for every width pair ``(m_a, m_b)``; two products back to back.
"""
from __future__ import annotations

import dataclasses

from amaranth.asserts import Initial
from amaranth.hdl import Assert, Assume, Cover, Module, Mux, ResetSignal, Signal, signed

from hdl.config import FMACConfig
from hdl.fmac import FMACCore

from hdl.lib.mustuse import mark_used

from .common import FormalWrapper, Proof, free_inputs, internal_signals

__all__ = ["FMACProduct", "FMACSteps", "PROOFS", "mutate_chunk_table"]


def free_inputs_legal_widths(m: Module, dut, widths) -> None:
    """Every input of the fMAC core free (``AnySeq``); at a ``start``, both widths assumed to
    be among ``widths``."""
    free_inputs(m, dut)

    def legal(w):
        return Signal.cast(sum((w == v for v in widths[1:]), w == widths[0]).bool())

    with m.If(dut.start):
        m.d.comb += [Assume(legal(dut.width_a)), Assume(legal(dut.width_b))]


class FMACProduct(FormalWrapper):
    """Wrapper of :class:`FMACCore`: product value and cycle count against a shadow model.

    ``reference="mul"`` states the product as ``a * b`` (one multiplier; the solver must prove
    a multiplier equivalence, feasible for small widths), ``"chunks"`` as the docs' sum of the
    shifted 2-bit chunk products in the order of the definition (``a * b`` by the identity
    of docs/fmac.md section 1, checked for every width pair in ``tests/test_fmac_model.py``),
    independent of the DUT's pair schedule, lanes, chunk table and partial sums.
    ``one_product`` allows one start only, in cycle 0; ``value=False`` checks timing only;
    ``widths`` restricts the widths (default: every legal width).
    """

    def __init__(self, config: FMACConfig, *, one_product: bool = False, value: bool = True,
                 widths: tuple | None = None, reference: str = "chunks"):
        self.config = self._check_config(config, FMACConfig)
        self.one_product = bool(one_product)
        self.value = bool(value)
        if widths is not None and not set(widths) <= set(config.widths):
            mark_used(self)
            raise ValueError(f"FMACProduct.widths must be legal widths of {config!r}, "
                             f"not {widths!r}")
        self.widths = config.widths if widths is None else tuple(widths)
        if reference not in ("chunks", "mul"):
            mark_used(self)
            raise ValueError(f"FMACProduct.reference must be 'chunks' or 'mul', "
                             f"not {reference!r}")
        self.reference = reference
        super().__init__(FMACCore(config=config))

    def properties(self, m: Module):
        cfg, dut = self.config, self.dut
        mm, lanes = cfg.max_mantissa, cfg.lanes
        free_inputs_legal_widths(m, dut, self.widths)
        widths = self.widths
        if self.one_product:
            m.d.comb += Assume(dut.start == Initial())

        # expected product and beat of the operands on the inputs (docs/fmac.md, section 1)
        a_eff = Signal(mm, name="ref_a")
        b_eff = Signal(mm, name="ref_b")
        m.d.comb += [a_eff.eq(dut.a_mag & ((1 << dut.width_a) - 1)[:mm]),
                     b_eff.eq(dut.b_mag & ((1 << dut.width_b) - 1)[:mm])]
        mag = Signal(2 * mm, name="ref_mag")
        if self.reference == "mul":
            m.d.comb += mag.eq(a_eff * b_eff)
        else:
            # docs/fmac.md section 1: a*b = sum_i sum_j (a_i * b_j) << 2(i + j) over 2-bit
            # chunks (chunks above the width are zero in a_eff/b_eff)
            terms = [(a_eff.word_select(i, 2) * b_eff.word_select(j, 2)) << (2 * (i + j))
                     for i in range(mm // 2) for j in range(mm // 2)]
            m.d.comb += mag.eq(sum(terms[1:], terms[0]))
        ref = Signal(signed(2 * mm + 1), name="ref_product")
        m.d.comb += ref.eq(Mux(dut.a_sign ^ dut.b_sign, -mag, mag))
        pairs = Signal(range(mm * mm // 4 + 1), name="ref_pairs")
        m.d.comb += pairs.eq((dut.width_a >> 1) * (dut.width_b >> 1))
        beat = Signal(range(mm * mm // 4 + 1), name="ref_beat")
        m.d.comb += beat.eq((pairs + lanes - 1) // lanes)

        # shadow of the running product
        go = Signal(name="ref_go")
        m.d.comb += go.eq(dut.start & dut.ready)
        act = Signal(name="ref_active")
        cnt = Signal(range(mm * mm // 4 + 2), name="ref_step")      # step of this cycle
        s_beat = Signal.like(beat, name="ref_active_beat")
        s_prod = Signal.like(ref, name="ref_active_product")
        s_wa = Signal.like(dut.width_a, name="ref_active_wa")
        s_wb = Signal.like(dut.width_b, name="ref_active_wb")
        fin_due = Signal(name="ref_done_due")
        fin_prod = Signal.like(ref, name="ref_done_product")
        fin_wa = Signal.like(dut.width_a, name="ref_done_wa")
        fin_wb = Signal.like(dut.width_b, name="ref_done_wb")
        last_step = Signal(name="ref_last_step")
        m.d.comb += last_step.eq(act & (cnt == s_beat))
        m.d.sync += [fin_due.eq(last_step), fin_prod.eq(s_prod), fin_wa.eq(s_wa),
                     fin_wb.eq(s_wb)]
        with m.If(go):
            m.d.sync += [act.eq(1), cnt.eq(1), s_beat.eq(beat), s_prod.eq(ref),
                         s_wa.eq(dut.width_a), s_wb.eq(dut.width_b)]
        with m.Elif(last_step):
            m.d.sync += act.eq(0)
        with m.Elif(act):
            m.d.sync += cnt.eq(cnt + 1)

        m.d.comb += [
            Assert(dut.ready == (~act | last_step), "ready: idle or last step"),
            Assert(dut.busy == act, "busy while a product runs"),
            Assert(dut.done == fin_due, "done exactly B + 1 cycles after start"),
        ]
        if self.value:
            with m.If(fin_due):
                m.d.comb += Assert(dut.product == fin_prod, "product == a * b")

        for wa in widths:
            for wb in widths:
                m.d.comb += Cover(fin_due & (fin_wa == wa) & (fin_wb == wb),
                                  f"a {wa}x{wb} product completes")
        if not self.one_product:
            m.d.comb += Cover(go & act, "products back to back")


class FMACSteps(FormalWrapper):
    """Wrapper of :class:`FMACCore`: the product proved step by step (lemma-wise), for widths
    where the whole-product equivalence does not finish (6 and 8 bits).

    docs/fmac.md: a product is the sum of its chunk pairs ``p = i*nb + j`` (``nb`` = chunks
    of b), ``lanes`` pairs per step in increasing ``p``, each ``(-1)^(s_a^s_b) a_i b_j
    4^(i+j)``. A shadow in the wrapper keeps, per running product, the step number and the
    partial sum of the pairs of the steps before, from the operands captured at ``start``,
    and asserts in every step of a product, for every lane ``k`` (its pair ``p = step*lanes
    + k``): the lane is enabled exactly when ``p < na*nb``; an enabled lane holds ``i = p //
    nb``, ``j = p % nb``, the chunks ``a_i``, ``b_j`` and the shift ``i + j``; the DUT's
    partial sum equals the shadow's. Then ``done`` exactly ``B + 1`` cycles after ``start``
    with ``product`` = the shadow's full sum (and ``ready``/``busy`` per beat, as
    :class:`FMACProduct`). smtbmc assumes what it proved at earlier steps, so each step's
    check is one step's chunk products and an addition, not a multiplier equivalence.

    The remaining step, ``sum_i sum_j a_i b_j 4^(i+j) = a * b``, is arithmetic on the
    operands alone; ``tests/test_fmac_model.py`` checks it for every width pair exhaustively.
    The lemmas read the DUT's lane registers and partial sum (``internal_signals``, the DUT
    unchanged); a rename raises ``KeyError``.
    """

    def __init__(self, config: FMACConfig, *, widths: tuple | None = None):
        self.config = self._check_config(config, FMACConfig)
        if widths is not None and not set(widths) <= set(config.widths):
            mark_used(self)
            raise ValueError(f"FMACSteps.widths must be legal widths of {config!r}, "
                             f"not {widths!r}")
        self.widths = config.widths if widths is None else tuple(widths)
        super().__init__(FMACCore(config=config))

    def elaborate(self, platform):
        m = Module()
        inner = mark_used(self.dut).elaborate(platform)
        lanes = self.config.lanes
        names = ["psum"] + [f"lane_{k}_{x}" for k in range(lanes)
                            for x in ("ca", "cb", "ij_onehot", "i", "j")]
        self.internal = internal_signals(inner, names)
        m.submodules.dut = inner
        m.d.comb += Assume(~ResetSignal("sync"))
        self.properties(m)
        return m

    def properties(self, m: Module):
        cfg, dut, sig = self.config, self.dut, self.internal
        mm, lanes = cfg.max_mantissa, cfg.lanes
        maxc = mm // 2
        free_inputs_legal_widths(m, dut, self.widths)
        widths = self.widths

        def chunk(v, i):
            return (v >> (2 * i))[:2]

        go = Signal(name="ref_go")
        m.d.comb += go.eq(dut.start & dut.ready)
        prod = signed(2 * mm + 1)
        # the running product as captured at start
        act = Signal(name="ref_active")
        ra = Signal(mm, name="ref_a")
        rb = Signal(mm, name="ref_b")
        rneg = Signal(name="ref_neg")
        rnb = Signal(range(maxc + 1), name="ref_nb")
        rnp = Signal(range(maxc * maxc + 1), name="ref_npairs")
        step = Signal(range(maxc * maxc + 1), name="ref_step")
        rpsum = Signal(prod, name="ref_psum")
        # this step's pairs, terms and the sum after it
        terms, last_step = [], Signal(name="ref_last_step")
        for k in range(lanes):
            p = Signal(range(maxc * maxc + lanes + 1), name=f"ref_{k}_p")
            i = Signal(range(maxc * maxc + lanes + 1), name=f"ref_{k}_i")
            j = Signal(range(maxc + 1), name=f"ref_{k}_j")
            en = Signal(name=f"ref_{k}_en")
            ca = Signal(2, name=f"ref_{k}_ca")
            cb = Signal(2, name=f"ref_{k}_cb")
            mag = Signal(2 * mm, name=f"ref_{k}_mag")
            term = Signal(prod, name=f"ref_{k}_term")
            m.d.comb += [p.eq(step * lanes + k), en.eq(p < rnp),
                         i.eq(p // rnb), j.eq(p % rnb),
                         ca.eq(chunk(ra, i)), cb.eq(chunk(rb, j)),
                         mag.eq((ca * cb) << (2 * (i + j))),
                         term.eq(Mux(en, Mux(rneg, -mag, mag), 0))]
            terms.append(term)
            with m.If(act):
                # the lane's shift register is one-hot i + j when enabled, zero when not
                m.d.comb += Assert(sig[f"lane_{k}_ij_onehot"].any() == en,
                                   f"lane {k} enabled iff p < na*nb")
                with m.If(en):
                    m.d.comb += [
                        Assert(sig[f"lane_{k}_i"] == i, f"lane {k}: i = p // nb"),
                        Assert(sig[f"lane_{k}_j"] == j, f"lane {k}: j = p % nb"),
                        Assert(sig[f"lane_{k}_ca"] == ca, f"lane {k}: chunk a_i"),
                        Assert(sig[f"lane_{k}_cb"] == cb, f"lane {k}: chunk b_j"),
                        Assert(sig[f"lane_{k}_ij_onehot"] == (1 << (i + j)),
                               f"lane {k}: shift i + j"),
                    ]
        after = Signal(prod, name="ref_psum_after")
        m.d.comb += [after.eq(sum(terms, rpsum)),
                     last_step.eq(act & ((step + 1) * lanes >= rnp))]
        with m.If(act):
            m.d.comb += Assert(sig["psum"] == rpsum, "partial sum of the steps before")

        fin_due = Signal(name="ref_done_due")
        fin_prod = Signal(prod, name="ref_done_product")
        fin_w = Signal(8, name="ref_done_widths")
        rw = Signal(8, name="ref_widths")
        m.d.sync += [fin_due.eq(last_step), fin_prod.eq(after), fin_w.eq(rw)]
        with m.If(go):
            na = Signal(range(maxc + 1), name="ref_in_na")
            nb = Signal(range(maxc + 1), name="ref_in_nb")
            m.d.comb += [na.eq(dut.width_a >> 1), nb.eq(dut.width_b >> 1)]
            m.d.sync += [act.eq(1), step.eq(0), rpsum.eq(0),
                         ra.eq(dut.a_mag & ((1 << dut.width_a) - 1)[:mm]),
                         rb.eq(dut.b_mag & ((1 << dut.width_b) - 1)[:mm]),
                         rneg.eq(dut.a_sign ^ dut.b_sign), rnb.eq(nb), rnp.eq(na * nb),
                         rw.eq(dut.width_a[:4] | (dut.width_b[:4] << 4))]
        with m.Elif(last_step):
            m.d.sync += act.eq(0)
        with m.Elif(act):
            m.d.sync += [step.eq(step + 1), rpsum.eq(after)]

        m.d.comb += [
            Assert(dut.ready == (~act | last_step), "ready: idle or last step"),
            Assert(dut.busy == act, "busy while a product runs"),
            Assert(dut.done == fin_due, "done exactly B + 1 cycles after start"),
        ]
        with m.If(fin_due):
            m.d.comb += Assert(dut.product == fin_prod, "product == sum of its chunk pairs")
        for wa in widths:
            for wb in widths:
                m.d.comb += Cover(fin_due & (fin_w == (wa | (wb << 4))),
                                  f"a {wa}x{wb} product completes")
        m.d.comb += Cover(go & act, "products back to back")


def mutate_chunk_table(il_text: str) -> str:
    """A broken fMAC: lane 0's chunk product ``3 * 3`` (positive) gives 8 instead of 9.

    Edits the one ``assign \\lane_0_uprod [3:0] 4'1001`` of the RTLIL (the entry of the
    unsigned chunk-product table; the sign is applied after it); raises ``ValueError`` when the
    DUT's RTLIL no longer has exactly one (the mutation must not rot).
    """
    old = "assign \\lane_0_uprod [3:0] 4'1001"
    if il_text.count(old) != 1:
        raise ValueError(f"mutate_chunk_table: expected one {old!r} in the RTLIL, "
                         f"found {il_text.count(old)}")
    return il_text.replace(old, "assign \\lane_0_uprod [3:0] 4'1000")


def _proof(name, lanes, depth, *, one_product=False, value=True, widths=None,
           reference="chunks", steps=False, **kw):
    cfg = dataclasses.replace(FMACConfig.preset("tiny"), lanes=lanes)
    starts = "one product started in cycle 0" if one_product else "free start times"
    ref = "a*b" if reference == "mul" else "sum of chunk products a_i*b_j*4^(i+j)"
    what = (f"product == {ref}, done exactly B+1 cycles after start, ready/busy per beat"
            if value else "done exactly B+1 cycles after start, ready/busy per beat")
    if steps:
        what = ("step by step: each lane's pair (i, j), chunks, shift and enable, the partial "
                "sum after every step, product == sum of chunk products a_i*b_j*4^(i+j) "
                "(= a*b: tests/test_fmac_model.py, exhaustive), done exactly B+1 cycles "
                "after start, ready/busy per beat")
    pairs = "every legal width pair" if widths is None else f"widths {sorted(widths)}"

    def build():
        if steps:
            return FMACSteps(cfg, widths=widths)
        return FMACProduct(cfg, one_product=one_product, value=value, widths=widths,
                           reference=reference)
    return Proof(
        name=name, block=f"FMACCore (max_mantissa 8, lanes {lanes}, acc_bits 24)",
        prop=f"{what}; {pairs}, any signs and magnitudes, {starts}",
        build=build, depth=depth, **kw)


#: The value of a product as one multiplier equivalence finishes with free starts for widths
#: 2 and 4 (the literal ``a * b``); 6- and 8-bit operands did not finish (docs/formal.md), so
#: for them the product is proved step by step (``FMACSteps``: lane lemmas and partial sums,
#: then the chunk identity, checked exhaustively by tests/test_fmac_model.py). The timing
#: (ready/busy/done per beat) is proved for every width pair; the covers show each pair's
#: product completing.
PROOFS = [
    _proof("fmac_lanes1_value_w24", 1, 12, widths=(2, 4), reference="mul"),
    _proof("fmac_lanes4_value_w24", 4, 12, widths=(2, 4), reference="mul"),
    _proof("fmac_lanes1_steps", 1, 36, steps=True, timeout=1200),
    _proof("fmac_lanes4_steps", 4, 12, steps=True, timeout=1200),
    _proof("fmac_lanes4_steps_mutant", 4, 12, widths=(6, 8), steps=True, modes=("bmc",),
           expect="fail", mutate=mutate_chunk_table),
    _proof("fmac_lanes1_timing", 1, 40, value=False),
    _proof("fmac_lanes4_timing", 4, 20, value=False),
    _proof("fmac_lanes1_mutant", 1, 12, widths=(2, 4), reference="mul", modes=("bmc",),
           expect="fail", mutate=mutate_chunk_table),
]
