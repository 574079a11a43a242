"""FP32 -> FAST block floating point converter (docs/bfp.md).

Golden model: :mod:`sim.model.bfp` (bit-exact, including the LFSR). Format, layouts and policies:
``docs/bfp.md``.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import BFPConfig
from ..formats import BFPFlags, bfp_group_layout, fp32_group_layout
from ..fp32.round import count_leading_zeros
from ..lib.rotate import rotate_lanes
from ..lib.mustuse import check_config_type
from ..registry import Block
from .lfsr import LFSR_TAPS, LFSR_WIDTH, BFPNoise
from .pipeline import StallAll

__all__ = ["Rounding", "E_ZERO", "width_shape", "fp32_stream_layout", "bfp_stream_layout",
           "decode_width", "layout_fields", "tree_levels", "converter_latency",
           "converter_members", "residual_layout",
           "BFPConverter"]

#: Shared exponent of an all-zero (or NaN/Inf) group: one below any real group's exponent.
E_ZERO = -150


class Rounding(enum.Enum, shape=2):
    """Rounding mode of a group, chosen per group at run time (``sim.model.bfp.ROUND_*``).

    Code 3 is reserved and behaves (and is echoed) as ``TRUNCATE``.
    """

    NEAREST = 0      #: round to nearest, ties to even
    STOCHASTIC = 1   #: add ``noise_bits`` LFSR bits below the LSB, then truncate
    TRUNCATE = 2     #: toward zero (stochastic with the noise forced to zero)


def width_shape(config: BFPConfig):
    """Shape of a run-time width field: holds ``m`` itself (4 bits when max_mantissa = 8)."""
    return unsigned(config.max_mantissa.bit_length())


def fp32_stream_layout(config: BFPConfig) -> data.StructLayout:
    """Converter input payload, LSB first: ``data`` (``group_size`` FP32 words, element 0 in the
    low bits) | ``width`` (``m``) | ``rounding`` (:class:`Rounding`)."""
    return data.StructLayout({
        "data": fp32_group_layout(config),
        "width": width_shape(config),
        "rounding": Rounding,
    })


def bfp_stream_layout(config: BFPConfig) -> data.StructLayout:
    """A BFP group on a stream (converter output, :class:`BFPToFP32` input), LSB first:
    ``group`` (:func:`hdl.formats.bfp_group_layout`: ``exp`` | ``elems[i]`` = ``mag`` | ``sign``)
    | ``width`` (``m`` used) | ``rounding`` (mode used) | ``flags`` (``invalid`` | ``overflow``)."""
    return data.StructLayout({
        "group": bfp_group_layout(config),
        "width": width_shape(config),
        "rounding": Rounding,
        "flags": BFPFlags,
    })


def layout_fields(layout: data.Layout) -> dict:
    """``{field: [offset, width]}`` of a layout's top-level fields (JSON-friendly)."""
    return {name: [field.offset, field.width] for name, field in layout}


def decode_width(m: Module, code, config: BFPConfig, *, name: str):
    """Width actually used for a ``width`` field value: ``2 * clamp(code // 2, 1, mm // 2)``
    (legal widths unchanged; other codes go to the nearest legal width below, like the fMAC)."""
    half = code >> 1
    top = config.max_mantissa // 2
    eff = Signal(width_shape(config), name=name)
    m.d.comb += eff.eq(Mux(half == 0, 2, Mux(half > top, 2 * top, Cat(Const(0, 1), half))))
    return eff


def decode_rounding(m: Module, code, *, name: str):
    """Rounding mode actually used: the reserved code 3 behaves as ``TRUNCATE``."""
    eff = Signal(Rounding, name=name)
    raw = code.as_value()
    m.d.comb += eff.eq(Mux(raw == 3, Rounding.TRUNCATE, raw))
    return eff


def tree_levels(group_size: int) -> int:
    """4-way levels of the group-maximum tree: ``ceil(log4(group_size))`` (0 for one value)."""
    levels, n = 0, group_size
    while n > 1:
        n, levels = -(-n // 4), levels + 1
    return levels


def converter_latency(config: BFPConfig) -> int:
    """:attr:`BFPConverter.latency` for ``config``: ``max(2, tree_levels(G)) + 3`` cycles
    (5 for G <= 16, 6 for G <= 64)."""
    return max(2, tree_levels(config.group_size)) + 3


def _max4_compare(m: Module, values: list, *, name: str) -> list:
    """The pairwise comparisons of one level of the maximum tree: for each run of up to 4
    ``values``, ``{(a, b): run[a] >= run[b]}`` (a < b), made in parallel."""
    out = []
    for c in range(0, len(values), 4):
        run = values[c:c + 4]
        ge = {}
        for a in range(len(run)):
            for b in range(a + 1, len(run)):
                g = Signal(name=f"{name}_{c // 4}_ge_{a}_{b}")
                m.d.comb += g.eq(run[a] >= run[b])
                ge[a, b] = g
        out.append(ge)
    return out


def _max4_select(m: Module, values: list, ges: list, *, name: str) -> list:
    """The rest of one level of the maximum tree: the maximum of each run of up to 4 ``values``
    from its comparisons ``ges`` (:func:`_max4_compare`, possibly registered).

    The winner (the value no other beats, ties going to the lower index) is selected with an
    AND-OR mux, so a level costs one comparator plus about three LUTs instead of two dependent
    comparator + mux levels.
    """
    out = []
    for c in range(0, len(values), 4):
        run = values[c:c + 4]
        ge = ges[c // 4]
        mx = Signal(len(run[0]), name=f"{name}_{c // 4}")
        if len(run) == 1:
            m.d.comb += mx.eq(run[0])
        else:
            terms = []
            for a in range(len(run)):
                win = Const(1, 1)
                for b in range(len(run)):
                    if b != a:
                        win = win & (ge[a, b] if a < b else ~ge[b, a])
                w = Signal(name=f"{name}_{c // 4}_win_{a}")
                m.d.comb += w.eq(win)
                terms.append(Mux(w, run[a], 0))
            acc = terms[0]
            for t in terms[1:]:
                acc = acc | t
            m.d.comb += mx.eq(acc)
        out.append(mx)
    return out


def _max4(m: Module, values: list, *, name: str) -> list:
    """One level of the maximum tree: the maximum of each run of up to 4 ``values``
    (:func:`_max4_compare` then :func:`_max4_select`)."""
    return _max4_select(m, values, _max4_compare(m, values, name=name), name=name)


def _max_tree_step(m: Module, tree: list, ges, level: int, *, last: bool):
    """One front stage's part of the maximum tree: the selection whose comparisons the previous
    stage registered (``ges``, or None), then, if values are left, either the comparisons of
    the next level (registered for the next stage) or, in the ``last`` front stage, every
    remaining level. Returns ``(tree, ges, level)``."""
    if ges is not None:
        tree, ges, level = _max4_select(m, tree, ges, name=f"max_{level}"), None, level + 1
    if len(tree) > 1:
        if last:
            while len(tree) > 1:
                tree, level = _max4(m, tree, name=f"max_{level}"), level + 1
        else:
            ges = _max4_compare(m, tree, name=f"max_{level}")
    return tree, ges, level


def _reg_ges(st, ges, *, name: str):
    """Stage registers of the comparisons ``ges`` (None: none)."""
    if ges is None:
        return None
    return [{k: st.reg(g, name=f"{name}_{c}_ge_{k[0]}_{k[1]}") for k, g in ge.items()}
            for c, ge in enumerate(ges)]


def converter_members(config: BFPConfig) -> dict:
    """The signature members of :class:`BFPConverter` (``i``, ``o``, ``flags``,
    ``clear_flags``), also those of the converters built around it."""
    return {
        "i": In(stream.Signature(fp32_stream_layout(config))),
        "o": Out(stream.Signature(bfp_stream_layout(config))),
        "flags": Out(BFPFlags),
        "clear_flags": In(1),
    }


def residual_layout(config: BFPConfig) -> data.ArrayLayout:
    """:attr:`BFPConverter.residual`: one ``|H_j - 4 M_j|`` (at most 4) per element."""
    return data.ArrayLayout(unsigned(3), config.group_size)


class BFPConverter(wiring.Component):
    """Stream converter FP32 -> BFP, one group of ``group_size`` values per cycle.

    Number format: in, IEEE 754 binary32 (subnormals exact); out, a BFP group (shared signed
    exponent ``E = floor(log2(max|x|))``, per element sign and ``m``-bit magnitude ``M``, value
    ``(-1)**sign * M * 2**(E - (m - 1))``). Width ``m`` and :class:`Rounding` come with every
    group and are echoed with it. All-zero group: ``E = -150``, ``M = 0``. A group with a NaN
    (Inf) sets its ``invalid`` (``overflow``) flag and is output as ``E = -150``, all
    ``sign = M = 0``. ``M`` rounding up to ``2**m`` saturates to ``2**m - 1``.

    Pipeline (``docs/bfp.md``): ``latency = max(2, ceil(log4 G)) + 3`` cycles from input
    transfer to output valid (5 for G <= 16, 6 for G <= 64). Front stages, one 4-way level
    of the maximum tree of the 8-bit exponent fields each, its pairwise comparisons registered
    a stage ahead of its selection (stage 0: the first level's comparisons only, so the input
    ends at comparators; stage ``s``: level ``s - 1``'s selection and level ``s``'s
    comparisons, the last front stage every level left; stage 0 also: per-element NaN/Inf,
    OR of all fractions; stage 1: group NaN/Inf, bit length of that OR, per-element exponent
    term) | shared exponent and per-element shift amount | alignment (variable shift of the
    significand into an ``m + r``-bit window) and sticky bit | round-up decision, increment,
    saturation, NaN/Inf override (output register). Stall-all: every register loads when
    ``~o.valid | o.ready`` (``i.ready`` is that enable), so one group per cycle without
    backpressure and nothing dropped with it. The LFSR (:class:`BFPNoise`) advances once per
    group as the group leaves the alignment stage for the round stage, and the group takes
    that draw with it, registered: the n-th group after
    reset gets the n-th draw, as when it is accepted, and the round stage's noise sum starts
    at a register. Golden model:
    :mod:`sim.model.bfp`.

    With ``residual=True`` the round stage also gives, per element, ``|H_j - 4 M_j|`` where
    ``H_j`` is the element's magnitude at width ``m + 2`` with round-to-nearest-even (what a
    second converter fed the group at ``m + 2``, ``NEAREST`` would output) and ``M_j`` its
    magnitude on ``o`` (FAST's statistic, :class:`hdl.bfp.stat.QuantStat`). It shares every
    stage with ``o``: the ``m + 2`` value is the alignment window shifted two bits less, i.e.
    the same window read two bits lower (the window keeps at least 3 fraction bits), its
    sticky bit is computed instead of ``o``'s (``o``'s is that one OR the two window bits
    between the two guard bits), and only the low 4 bits of ``H_j`` are formed
    (``|H_j - 4 M_j| <= 4``: ``H_j`` is within 4 of ``4 floor(x)``, ``4 M_j`` is
    ``4 floor(x)`` or 4 more, both saturate at the top). ``o`` and ``flags`` are unchanged.

    Parameters
    ----------
    config : BFPConfig
        ``group_size``, ``max_mantissa``, ``exp_bits``, ``noise_bits``, ``lfsr_seed``.
    residual : bool
        Add the :attr:`residual` output (default ``False``).
    noise_in : bool
        Take the stochastic-rounding noise from the :attr:`noise` input instead of the
        converter's own LFSR (default ``False``): a converter fed one element at a time
        (:class:`hdl.multi.codec.LinkTxCodec`) gives it the noise of that element's lane.
    rotate : bool
        Add the :attr:`rot` input (default ``False``): the group arrives rotated and leaves in
        element order (:class:`hdl.array.quant.LineQuantizer`'s block columns). The lanes
        are put in element order at stage 1's input, where each is its significand, sign
        and exponent term (35 bits, not the FP32 word), so that the round stage ends at its
        decision (no rotation behind the rounding; no cycle more).

    Attributes
    ----------
    latency : int
        :func:`converter_latency` of ``config``.

    Members
    -------
    i : In(stream.Signature(fp32_stream_layout(config)))
        FP32 groups with their ``width`` and ``rounding``.
    o : Out(stream.Signature(bfp_stream_layout(config)))
        BFP groups, the width and mode used, and the group's ``flags``.
    flags : Out(BFPFlags)
        Sticky OR of the ``flags`` of every group delivered on ``o`` since reset or the last
        ``clear_flags``.
    clear_flags : In(1)
        Clear ``flags`` at the next edge (a flagged group delivered in the same cycle still
        sets them).
    residual : Out(residual_layout(config))
        Only with ``residual=True``: ``|H_j - 4 M_j|`` of each element of the group on ``o``
        (registered and held with ``o.payload``). Meaningful when ``m <= max_mantissa - 2`` and
        the group is neither NaN nor Inf (otherwise unspecified).
    noise : In(ArrayLayout(unsigned(noise_bits), group_size))
        Only with ``noise_in=True``: each element's noise, taken with the group on ``i`` (the
        same transfer) and used for it in ``STOCHASTIC`` mode.
    rot : In(range(group_size))
        Only with ``rotate=True``, taken with the group on ``i``: element ``j`` of the group is
        word ``(j + rot) mod G`` of ``i.payload.data``. Element ``j`` is converted with its
        own noise, and ``o`` and ``residual`` are in element order: the same outputs as
        ``data`` rotated right by ``rot`` words with ``rot = 0``. Registered into stage 0
        with the group and applied at stage 1's input.
    """

    def __init__(self, *, config: BFPConfig, residual: bool = False, noise_in: bool = False,
                 rotate: bool = False):
        check_config_type(self, config, BFPConfig)
        self.config = config
        self.latency = converter_latency(config)
        self.with_residual = bool(residual)
        self.noise_in = bool(noise_in)
        self.rotate = bool(rotate)
        members = converter_members(config)
        if self.with_residual:
            members["residual"] = Out(residual_layout(config))
        if self.noise_in:
            members["noise"] = In(data.ArrayLayout(unsigned(config.noise_bits),
                                                   config.group_size))
        if self.rotate:
            members["rot"] = In(range(config.group_size))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        G, mm, r = cfg.group_size, cfg.max_mantissa, cfg.noise_bits
        fine = self.with_residual
        # fraction bits of the aligned window: r, and at least 3 with the residual (the m + 2
        # value's guard bit is the third below the binary point)
        rw = max(r, 3) if fine else r
        low = mm - 1 + rw               # zero bits appended below the significand
        win = rw + mm                   # aligned window: integer part | rw fraction bits
        front = max(2, tree_levels(G))
        if self.noise_in:
            noise = None
            carried = self.noise.as_value()       # registered down the pipeline with the group
        else:
            m.submodules.noise = noise = BFPNoise(config=cfg)
        rot = self.rot if self.rotate else None   # also carried with the group

        # ---- stall-all handshake: every register advances together ---------------------------
        st = StallAll(m, i=self.i, o=self.o, name="pipe")
        en = st.en

        # ---- front stage 0: decode every element; first tree level's comparisons -------------
        inp = self.i.payload
        width = decode_width(m, inp.width, cfg, name="in_width")
        rounding = decode_rounding(m, inp.rounding, name="in_rounding")
        d_in = Signal(range(mm + 1), name="in_width_short")          # mm - m
        m.d.comb += d_in.eq(mm - width)
        exps, sigs, signs, nans, infs = [], [], [], [], []
        for j in range(G):
            word = inp.data[j]
            expnz = Signal(name=f"in_{j}_exp_nz")
            special = Signal(name=f"in_{j}_special")
            fracnz = Signal(name=f"in_{j}_frac_nz")
            m.d.comb += [
                expnz.eq(word.exp != 0),
                special.eq(word.exp == 0xFF),
                fracnz.eq(word.frac != 0),
            ]
            exps.append(word.exp)
            sigs.append(Cat(word.frac, expnz))
            signs.append(word.sign)
            nans.append(special & fracnz)
            infs.append(special & ~fracnz)
        # OR of every fraction: when no exponent field is set (all zero or subnormal) its bit
        # length gives the shared exponent; otherwise it is not used
        fracor = Signal(23, name="in_frac_or")
        acc = inp.data[0].frac
        for j in range(1, G):
            acc = acc | inp.data[j].frac
        m.d.comb += fracor.eq(acc)

        # maximum of the exponent fields (a NaN/Inf's 255 takes part: such a group's output is
        # overridden at the end anyway)
        # (only the first level's comparisons here: stage 1 selects; the input path ends at the
        # comparators)
        ges = _max4_compare(m, exps, name="max_0") if len(exps) > 1 else None
        level = 0
        p = "s0"
        v = st.valid(self.i.valid, name=f"{p}_valid")
        ges = _reg_ges(st, ges, name=f"{p}_max")
        sigs = [st.reg(s, name=f"{p}_e{j}_sig") for j, s in enumerate(sigs)]
        signs = [st.reg(s, name=f"{p}_e{j}_sign") for j, s in enumerate(signs)]
        exps = [st.reg(x, name=f"{p}_e{j}_exp") for j, x in enumerate(exps)]
        tree = exps
        nans = [st.reg(x, name=f"{p}_e{j}_nan") for j, x in enumerate(nans)]
        infs = [st.reg(x, name=f"{p}_e{j}_inf") for j, x in enumerate(infs)]
        fracor = st.reg(fracor, name=f"{p}_frac_or")
        width = st.reg(width, name=f"{p}_width")
        rounding = st.reg(rounding, name=f"{p}_rounding")
        if rot is not None:
            rot = st.reg(rot, name=f"{p}_rot")
        d = st.reg(d_in, name=f"{p}_width_short")
        h_off = st.reg(d_in + 23, name=f"{p}_h_offset", shape=range(mm + 24))
        if noise is None:
            carried = st.reg(carried, name=f"{p}_noise")

        # ---- front stage 1: the first tree level's selection (and the next level's compares,
        # or every remaining level in the last front stage); NaN/Inf of the group; bit length
        # of the OR ---------------------------------------------------------------------------
        tree, ges, level = _max_tree_step(m, tree, ges, level, last=front == 2)
        hs = []
        for j in range(G):
            # h = max(exp, 1) - 23 - (mm - m): the shift amount will be (group max exp) - h
            # (sig[23] is the hidden bit, exp != 0)
            h = Signal(signed(10), name=f"e{j}_h")
            m.d.comb += h.eq(Cat(exps[j][0] | ~sigs[j][23], exps[j][1:]) - h_off)
            hs.append(h)
        bitlen = Signal(range(24), name="frac_or_bitlen")   # 0 for 0, else msb + 1
        # (a leading-zero tree, not a priority chain over the 23 bits)
        m.d.comb += bitlen.eq(23 - count_leading_zeros(m, fracor, name="frac_or"))
        if rot is not None:
            # into element order here (element j is word (j + rot) mod G), so every later
            # stage works in element order and the round stage ends at its decision: the
            # rotation behind the rounding was the S = 8 FPGA core's slowest estimated path
            # (15.45-16.8 ns). The group maximum, the OR of the fractions and NaN/Inf do not
            # depend on the order.
            def to_elements(lanes):
                width = len(Value.cast(lanes[0]))
                flat = rotate_lanes(lanes, rot, left=False)
                return [flat[j * width:(j + 1) * width] for j in range(G)]
            sigs, signs = to_elements(sigs), to_elements(signs)
            hs = [h.as_signed() for h in to_elements(hs)]
        p = "s1"
        v = st.valid(v, name=f"{p}_valid")
        tree = [st.reg(t, name=f"{p}_max_{i}") for i, t in enumerate(tree)]
        ges = _reg_ges(st, ges, name=f"{p}_max")
        sigs = [st.reg(s, name=f"{p}_e{j}_sig") for j, s in enumerate(sigs)]
        signs = [st.reg(s, name=f"{p}_e{j}_sign") for j, s in enumerate(signs)]
        hs = [st.reg(h, name=f"{p}_e{j}_h") for j, h in enumerate(hs)]
        nan = st.reg(Cat(*nans).any(), name=f"{p}_nan")
        inf = st.reg(Cat(*infs).any(), name=f"{p}_inf")
        bitlen = st.reg(bitlen, name=f"{p}_frac_or_bitlen")
        width = st.reg(width, name=f"{p}_width")
        rounding = st.reg(rounding, name=f"{p}_rounding")
        d = st.reg(d, name=f"{p}_width_short")
        if noise is None:
            carried = st.reg(carried, name=f"{p}_noise")

        # ---- further front stages (G > 16): one tree level each (selection, then the next
        # level's comparisons, or every level left in the last one) ----------------------------
        for fs in range(2, front):
            tree, ges, level = _max_tree_step(m, tree, ges, level, last=fs == front - 1)
            p = f"s{fs}"
            v = st.valid(v, name=f"{p}_valid")
            tree = [st.reg(t, name=f"{p}_max_{i}") for i, t in enumerate(tree)]
            ges = _reg_ges(st, ges, name=f"{p}_max")
            sigs = [st.reg(x, name=f"{p}_e{j}_sig") for j, x in enumerate(sigs)]
            signs = [st.reg(x, name=f"{p}_e{j}_sign") for j, x in enumerate(signs)]
            hs = [st.reg(x, name=f"{p}_e{j}_h") for j, x in enumerate(hs)]
            nan, inf = st.reg(nan, name=f"{p}_nan"), st.reg(inf, name=f"{p}_inf")
            bitlen = st.reg(bitlen, name=f"{p}_frac_or_bitlen")
            width = st.reg(width, name=f"{p}_width")
            rounding = st.reg(rounding, name=f"{p}_rounding")
            d = st.reg(d, name=f"{p}_width_short")
            if noise is None:
                carried = st.reg(carried, name=f"{p}_noise")
        assert len(tree) == 1 and ges is None

        # ---- shift stage: shared exponent, per-element shift amount --------------------------
        # P = maxexp + 23 if any normal, else the bit length of the OR of the (all subnormal)
        # fractions (0 for an all-zero group); E = P - 150; element j shifts its significand
        # (below `low` zero bits) right by k = P + (mm - m) - max(exp_j, 1).
        maxexp = tree[0]
        nz = Signal(name="max_exp_nz")
        shared = Signal(signed(10), name="shared_exp")
        z = Signal(signed(7), name="subnormal_shift")
        m.d.comb += [
            nz.eq(maxexp != 0),
            shared.eq(Mux(nz, maxexp - 127, bitlen - 150)),
            z.eq(bitlen + d - 1),
        ]
        limit = Signal(mm, name="limit")              # 2**m - 1
        m.d.comb += limit.eq(0)
        for w in cfg.widths:
            with m.If(width == w):
                m.d.comb += limit.eq((1 << w) - 1)
        ks = []
        for j in range(G):
            kr = Signal(signed(11), name=f"e{j}_shift_raw")
            k = Signal(6, name=f"e{j}_shift")
            # k_raw < 0 only for an all-zero group (no bit to place) and k_raw >= 64 leaves
            # nothing in the window but the sticky bit: both saturate to 63.
            m.d.comb += [
                kr.eq(Mux(nz, maxexp - hs[j], z)),
                k.eq(kr[:6] | Mux(kr[6:].any(), 0x3F, 0)),
            ]
            ks.append(k)
        # The sticky bit's bound: element j's sticky bit is set iff its lowest set significand
        # bit lies below the window's guard bit (below position rw - 3 with the residual, the
        # m + 2 value's), i.e. iff k - (trailing zeros of sig) > below; the count is 63 for a
        # zero significand (never). Counted here, so the align stage's sticky bit is one
        # subtract and compare instead of 24 compares and a 24-input OR.
        froms = []
        for j in range(G):
            tz = count_leading_zeros(m, sigs[j][::-1], name=f"e{j}_sig_trailing")
            frm = Signal(6, name=f"e{j}_sig_trailing_zeros")
            m.d.comb += frm.eq(Mux(sigs[j].any(), tz, 63))
            froms.append(frm)
        p = f"s{front}"
        v = st.valid(v, name=f"{p}_valid")
        ks = [st.reg(x, name=f"{p}_e{j}_shift") for j, x in enumerate(ks)]
        froms = [st.reg(x, name=f"{p}_e{j}_sig_trailing_zeros") for j, x in enumerate(froms)]
        sigs = [st.reg(x, name=f"{p}_e{j}_sig") for j, x in enumerate(sigs)]
        signs = [st.reg(x, name=f"{p}_e{j}_sign") for j, x in enumerate(signs)]
        shared = st.reg(shared, name=f"{p}_shared_exp")
        nan, inf = st.reg(nan, name=f"{p}_nan"), st.reg(inf, name=f"{p}_inf")
        limit = st.reg(limit, name=f"{p}_limit")
        width = st.reg(width, name=f"{p}_width")
        rounding = st.reg(rounding, name=f"{p}_rounding")
        if noise is None:
            carried = st.reg(carried, name=f"{p}_noise")

        # ---- align stage: window of (sig << low) >> k, sticky below the guard bit ------------
        windows, stickies = [], []
        # with the residual the sticky bit is the m + 2 value's: below the window position
        # rw - 3 (two below o's guard bit)
        below = mm + 2 if fine else mm
        for j in range(G):
            ext = Cat(Const(0, low), sigs[j])
            wdw = Signal(win, name=f"e{j}_window")
            sticky = Signal(name=f"e{j}_sticky_fine" if fine else f"e{j}_sticky")
            # bit b of sig lies below the guard bit (ext position < k + rw - 1) iff k > b + mm;
            # below position rw - 3 iff k > b + mm + 2; for the lowest set bit b (``froms``)
            over = Signal(signed(7), name=f"e{j}_shift_past_lowest")
            m.d.comb += [
                wdw.eq((ext >> ks[j])[:win]),
                over.eq(ks[j] - froms[j]),
                sticky.eq(over > below),
            ]
            windows.append(wdw)
            stickies.append(sticky)
        p = f"s{front + 1}"
        # A group takes its LFSR draw as it enters the round stage and the LFSR steps then, so
        # the n-th group after reset gets the n-th draw. The draw is registered with the
        # group: the round stage's noise sum starts at a register, not behind the LFSR.
        if noise is None:
            drawn = data.View(data.ArrayLayout(unsigned(r), G), carried)
        else:
            m.d.comb += noise.advance.eq(en & v)
            drawn = noise.noise
        noise_of = data.View(data.ArrayLayout(unsigned(r), G),
                             st.reg(Value.cast(drawn), name=f"{p}_noise"))
        v = st.valid(v, name=f"{p}_valid")
        windows = [st.reg(x, name=f"{p}_e{j}_window") for j, x in enumerate(windows)]
        stickies = [st.reg(x, name=f"{p}_e{j}_sticky") for j, x in enumerate(stickies)]
        signs = [st.reg(x, name=f"{p}_e{j}_sign") for j, x in enumerate(signs)]
        shared = st.reg(shared, name=f"{p}_shared_exp")
        bad = st.reg(nan | inf, name=f"{p}_bad")
        nan, inf = st.reg(nan, name=f"{p}_nan"), st.reg(inf, name=f"{p}_inf")
        limit = st.reg(limit, name=f"{p}_limit")
        width = st.reg(width, name=f"{p}_width")
        rounding = st.reg(rounding, name=f"{p}_rounding")

        # ---- round stage (output register): round-up decision, saturation, NaN/Inf override --
        # integer < 2**m, so integer + up > 2**m - 1 only when integer == 2**m - 1; the
        # increment is computed beside the decision and selected by it
        out = self.o.payload
        lane_mag = [Signal(mm, name=f"e{j}_mag_next") for j in range(G)]
        lane_sign = [Signal(name=f"e{j}_sign_next") for j in range(G)]
        lane_res = [Signal(3, name=f"e{j}_residual_next") for j in range(G)]
        for j in range(G):
            wdw = windows[j]
            integer, fraction = wdw[rw:], wdw[rw - r:rw]
            if fine:
                sticky_fine = stickies[j]
                sticky = Signal(name=f"e{j}_sticky")
                m.d.comb += sticky.eq(sticky_fine | wdw[rw - 3] | wdw[rw - 2])
            else:
                sticky = stickies[j]
            up_rne = wdw[rw - 1] & (sticky | integer[0])
            sum_sr = Signal(r + 1, name=f"e{j}_noise_sum")
            inc = Signal(mm + 1, name=f"e{j}_inc")
            m.d.comb += [sum_sr.eq(fraction + noise_of[j]), inc.eq(integer + 1)]
            up = Signal(name=f"e{j}_round_up")
            with m.Switch(rounding):
                with m.Case(Rounding.NEAREST):
                    m.d.comb += up.eq(up_rne)
                with m.Case(Rounding.STOCHASTIC):
                    m.d.comb += up.eq(sum_sr[r])
                with m.Default():
                    m.d.comb += up.eq(0)
            at_limit = Signal(name=f"e{j}_at_limit")
            take_inc = Signal(name=f"e{j}_take_inc")
            m.d.comb += [at_limit.eq(integer == limit), take_inc.eq(up & ~at_limit)]
            m.d.comb += [lane_mag[j].eq(Mux(bad, 0, Mux(take_inc, inc[:mm], integer))),
                         lane_sign[j].eq(signs[j] & ~bad)]
            if fine:
                # H = the m + 2 value: integer part wdw[rw - 2:], guard wdw[rw - 3], sticky
                # sticky_fine; saturates at 2**(m + 2) - 1 (integer part all ones: o's integer
                # at its limit and the two bits below it set). Only H mod 16 is formed, and
                # 4 M mod 16 from M's low 2 bits (a NaN/Inf group's M = 0 is not looked at).
                up_f = Signal(name=f"e{j}_fine_up")
                top_f = Signal(name=f"e{j}_fine_at_limit")
                low_f = Signal(4, name=f"e{j}_fine_low")
                h_f = Signal(4, name=f"e{j}_fine_mod16")
                m_lo = Signal(2, name=f"e{j}_mag_low")
                diff = Signal(4, name=f"e{j}_fine_diff")      # H - 4 M mod 16, in -4..4
                res = Signal(3, name=f"e{j}_residual")
                m.d.comb += [
                    up_f.eq(wdw[rw - 3] & (sticky_fine | wdw[rw - 2])),
                    top_f.eq(at_limit & wdw[rw - 1] & wdw[rw - 2]),
                    low_f.eq(Cat(wdw[rw - 2], wdw[rw - 1], integer[:2])),
                    h_f.eq(Mux(up_f & ~top_f, low_f + 1, low_f)),
                    m_lo.eq(Mux(take_inc, inc[:2], integer[:2])),
                    diff.eq(h_f - Cat(Const(0, 2), m_lo)),
                    res.eq(Mux(diff[3], (0 - diff)[:3], diff[:3])),
                ]
                m.d.comb += lane_res[j].eq(res)
        with m.If(en):
            for j in range(G):
                m.d.sync += [out.group.elems[j].mag.eq(lane_mag[j]),
                             out.group.elems[j].sign.eq(lane_sign[j])]
                if fine:
                    m.d.sync += self.residual[j].eq(lane_res[j])
            m.d.sync += [
                self.o.valid.eq(v),
                out.group.exp.eq(Mux(bad, E_ZERO, shared)),
                out.width.eq(width),
                out.rounding.eq(rounding),
                out.flags.invalid.eq(nan),
                out.flags.overflow.eq(inf),
            ]

        # ---- sticky status -------------------------------------------------------------------
        transfer = self.o.valid & self.o.ready
        m.d.sync += [
            self.flags.invalid.eq((self.flags.invalid & ~self.clear_flags)
                                  | (transfer & out.flags.invalid)),
            self.flags.overflow.eq((self.flags.overflow & ~self.clear_flags)
                                   | (transfer & out.flags.overflow)),
        ]
        return m


def _params(preset: str) -> dict:
    cfg = BFPConfig.preset(preset)
    return {
        **cfg.to_dict(),
        "latency": converter_latency(cfg),
        "tree_levels": tree_levels(cfg.group_size),
        "widths": list(cfg.widths),
        "width_bits": width_shape(cfg).width,
        "rounding": {mode.name.lower(): mode.value for mode in Rounding},
        "e_zero": E_ZERO,
        "lfsr": {"width": LFSR_WIDTH, "taps": list(LFSR_TAPS), "steps_per_group": cfg.noise_bits},
        "i_payload_bits": fp32_stream_layout(cfg).size,
        "o_payload_bits": bfp_stream_layout(cfg).size,
        "i_fields": layout_fields(fp32_stream_layout(cfg)),
        "o_fields": layout_fields(bfp_stream_layout(cfg)),
        "group_fields": layout_fields(bfp_group_layout(cfg)),
        "elem_bits": cfg.max_mantissa + 1,
    }


TESSERA_BLOCKS = [
    Block("bfp_converter", build=lambda preset: BFPConverter(config=BFPConfig.preset(preset)),
          params=_params),
]
