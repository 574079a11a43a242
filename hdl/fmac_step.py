"""The chunked fMAC split in two: the chunk schedule and the multiply datapath (docs/fmac.md).

A product's chunk schedule (which chunk pairs each step multiplies, when the product is done)
depends only on ``start`` and the run-time widths, not on the operands. Every PE of a systolic
array starts together with the same widths, so one :class:`FMACSchedule` can drive a whole row
of :class:`FMACDatapath` through an :class:`FMACStep` bus; :class:`hdl.fmac.FMACCore` is one of
each.

* :class:`FMACStep` - the schedule's commands for one step.
* :class:`FMACSchedule` - the chunk-pair sequencer (``ready``, ``busy``, the pair tables).
* :class:`FMACDatapath` - operand registers, chunk multipliers, the shifted partial sum.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import FMACConfig
from .lib.mustuse import used_if_rejected

__all__ = ["FMACStep", "FMACSchedule", "FMACDatapath", "fmac_width_shape"]


def fmac_width_shape(config: FMACConfig):
    """A run-time mantissa width field (holds ``m`` itself)."""
    return unsigned(range(config.max_mantissa + 1).stop.bit_length())


def _idx_bits(config: FMACConfig) -> int:
    return max(1, (config.max_mantissa // 2 - 1).bit_length())


def _check_config(owner: str, config) -> None:
    if not isinstance(config, FMACConfig):
        raise TypeError(f"{owner}.config must be an FMACConfig, not {config!r}")


class FMACStep(wiring.Signature):
    """One step's commands from a :class:`FMACSchedule` (its side: ``Out``) to datapaths.

    Members
    -------
    go : Out(1)
        A product starts: capture the operands (and tag) of this cycle, clear the partial sum.
    step : Out(1)
        A step that is not its product's last runs: add its chunk products to the partial sum.
    finish : Out(1)
        The product's last step runs: its sum is the product (``done`` next cycle).
    sel_i, sel_j : Out(unsigned(idx_bits)).array(lanes)
        In a ``go`` or ``step`` cycle: the chunk indices of ``a`` and ``b`` each lane multiplies
        in the next step.
    sel_sh : Out(unsigned).array(lanes)
        ``sel_i + sel_j``: the lane's product is shifted left by ``2 * sel_sh``.
    sel_en : Out(1).array(lanes)
        The lane has a pair in the next step (0: it adds nothing).
    """

    def __init__(self, config: FMACConfig):
        _check_config("FMACStep", config)
        self.config = config
        lanes, maxc = config.lanes, config.max_mantissa // 2
        idx = _idx_bits(config)
        super().__init__({
            "go": Out(1), "step": Out(1), "finish": Out(1),
            "sel_i": Out(unsigned(idx)).array(lanes),
            "sel_j": Out(unsigned(idx)).array(lanes),
            "sel_sh": Out(range(2 * maxc - 1)).array(lanes),
            "sel_en": Out(1).array(lanes),
        })

    def __eq__(self, other):
        return type(other) is FMACStep and other.config == self.config

    def __repr__(self):
        return f"FMACStep({self.config!r})"


class FMACSchedule(wiring.Component):
    """The chunk-pair schedule of back-to-back products (:class:`hdl.fmac.FMACCore`'s timing).

    A product started in cycle ``t`` (``start`` while ``ready``) runs its
    ``B = product_cycles(width_a, width_b, lanes)`` steps in cycles ``t+1 .. t+B``; ``cmd``
    says in each cycle what the datapaths do (``go`` in cycle ``t``, ``step`` in
    ``t+1 .. t+B-1``, ``finish`` in ``t+B``). ``ready`` is 1 when idle and in a product's last
    step, so products run back to back, one per beat of ``B`` cycles.

    Every lane steps its own pair ``(i, j)`` by ``lanes`` pairs through a small table of
    ``(j, chunks_b)`` and the schedule counts the pairs left, so no adder on a pair index is on
    the path to the datapaths' lane registers.

    Parameters
    ----------
    config : FMACConfig
    start_when_ready : bool
        The caller raises ``start`` only while ``ready`` (a systolic array, whose beat timer
        mirrors ``ready``): ``cmd.go`` is ``start`` itself, so the net that reaches every
        datapath of a row comes from the caller's register instead of a gate of ``start`` and
        this schedule's state. Default ``False``: ``cmd.go = start & ready``.

    Members
    -------
    start : In(1)
        Begin a product (honoured when ``ready``; with ``start_when_ready`` it must be).
    width_a, width_b : In(fmac_width_shape(config))
        Run-time mantissa widths ``m``, read in the ``start`` cycle; the hardware uses
        ``clamp(m // 2, 1, max_mantissa // 2)`` chunks.
    ready : Out(1)
        ``start`` is accepted this cycle.
    busy : Out(1)
        A step runs this cycle.
    cmd : Out(FMACStep(config))
        The step commands for the datapaths.
    """

    def __init__(self, *, config: FMACConfig, start_when_ready: bool = False):
        with used_if_rejected(self):
            _check_config("FMACSchedule", config)
            if not isinstance(start_when_ready, bool):
                raise TypeError(f"FMACSchedule.start_when_ready must be a bool, not "
                                f"{start_when_ready!r}")
        self.config, self.start_when_ready = config, start_when_ready
        w = fmac_width_shape(config)
        super().__init__({
            "start": In(1), "width_a": In(w), "width_b": In(w),
            "ready": Out(1), "busy": Out(1),
            "cmd": Out(FMACStep(config)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        maxc = cfg.max_mantissa // 2
        lanes = cfg.lanes
        max_pairs = maxc * maxc
        idx_w = _idx_bits(cfg)
        cmd = self.cmd

        def chunks_of(width, name):
            n = Signal(range(maxc + 1), name=name)
            half = width >> 1
            m.d.comb += n.eq(Mux(half == 0, 1, Mux(half > maxc, maxc, half)))
            return n

        def advance(j, nb, name):
            """Pair ``p = i*nb + j`` plus ``lanes``: ``(di, j')`` with ``p + lanes =
            (i + di)*nb + j'``, as a table of ``(j, nb)`` (no adder on ``p``)."""
            di = Signal(range(lanes + 1), name=f"{name}_di")
            jn = Signal(idx_w, name=f"{name}_j")
            with m.Switch(Cat(j, nb)):
                for nbv in range(1, maxc + 1):
                    for jv in range(nbv):
                        with m.Case(jv | (nbv << idx_w)):
                            m.d.comb += [di.eq((jv + lanes) // nbv), jn.eq((jv + lanes) % nbv)]
                with m.Default():
                    m.d.comb += [di.eq(0), jn.eq(0)]
            return di, jn

        busy = Signal(name="busy_r")                  # a step runs this cycle
        last = Signal(name="last_step")               # ... and it is the product's last
        r_nb = Signal(range(maxc + 1), name="r_nb", init=1)
        left = Signal(range(max_pairs + 1), name="pairs_left")   # npairs - this step's 1st pair
        # each lane's pair (i, j) = (p // nb, p % nb) in the next step, a step ahead in
        # registers (so ``cmd`` comes from registers or, on ``go``, from the widths); a lane
        # past the last pair is disabled and its (i, j) are don't-cares. ``lane_i``/``lane_j``
        # (the current step's pair) drive nothing: synthesis drops them; the formal proof
        # (formal/fmac.py, FMACSteps) reads them.
        lane_i = [Signal(idx_w, name=f"lane_{k}_i") for k in range(lanes)]
        lane_j = [Signal(idx_w, name=f"lane_{k}_j") for k in range(lanes)]
        nx_i = [Signal(idx_w, name=f"lane_{k}_next_i") for k in range(lanes)]
        nx_j = [Signal(idx_w, name=f"lane_{k}_next_j") for k in range(lanes)]
        nx_sh = [Signal(range(2 * maxc - 1), name=f"lane_{k}_next_ij") for k in range(lanes)]
        nx_en = [Signal(name=f"lane_{k}_next_en") for k in range(lanes)]

        m.d.comb += [
            self.ready.eq(~busy | last),
            self.busy.eq(busy),
            cmd.go.eq(self.start if self.start_when_ready else self.start & self.ready),
            cmd.step.eq(busy & ~last),
            cmd.finish.eq(busy & last),
        ]
        with m.If(cmd.finish):
            m.d.sync += busy.eq(0)

        # ---- a step that is not the last: the pairs two steps on -----------------------------
        with m.If(cmd.step):
            m.d.sync += [left.eq(left - lanes), last.eq(left <= 2 * lanes)]
            for k in range(lanes):
                di, jn = advance(nx_j[k], r_nb, f"lane_{k}_ahead")
                i2 = Signal(idx_w, name=f"lane_{k}_ahead_i")
                m.d.comb += i2.eq(nx_i[k] + di)          # wraps only in a disabled lane
                m.d.sync += [lane_i[k].eq(nx_i[k]), lane_j[k].eq(nx_j[k]),
                             nx_i[k].eq(i2), nx_j[k].eq(jn), nx_sh[k].eq(i2 + jn),
                             nx_en[k].eq(left > 2 * lanes + k)]

        # ---- start: the first two steps' pairs: tables of the two chunk counts --------------
        in_na = chunks_of(self.width_a, "in_na")
        in_nb = chunks_of(self.width_b, "in_nb")
        in_npairs = Signal(range(max_pairs + 1), name="in_npairs")
        in_last = Signal(name="in_last")
        in_en = Signal(lanes, name="in_lane_en")
        in_en2 = Signal(lanes, name="in_lane_en2")
        with m.Switch(Cat(in_na, in_nb)):
            for na in range(1, maxc + 1):
                for nbv in range(1, maxc + 1):
                    with m.Case(na | (nbv << len(in_na))):
                        npr = na * nbv
                        m.d.comb += [
                            in_npairs.eq(npr), in_last.eq(npr <= lanes),
                            in_en.eq(sum(1 << k for k in range(min(lanes, npr)))),
                            in_en2.eq(sum(1 << k for k in range(lanes) if lanes + k < npr))]
            with m.Default():
                m.d.comb += [in_npairs.eq(1), in_last.eq(1), in_en.eq(1), in_en2.eq(0)]
        first_i, first_j, first_sh = [], [], []
        for k in range(lanes):
            ij = []
            for step in range(2):                        # pair step * lanes + k
                i = Signal(idx_w, name=f"lane_{k}_first{step}_i")
                j = Signal(idx_w, name=f"lane_{k}_first{step}_j")
                with m.Switch(in_nb):
                    for nbv in range(1, maxc + 1):
                        p = step * lanes + k
                        with m.Case(nbv):
                            m.d.comb += [i.eq(min(p // nbv, maxc - 1)), j.eq(p % nbv)]
                    with m.Default():
                        m.d.comb += [i.eq(0), j.eq(0)]
                ij.append((i, j))
            (i0, j0), (i1, j1) = ij
            first_i.append(i0)
            first_j.append(j0)
            first_sh.append(i0 + j0)
            with m.If(cmd.go):
                m.d.sync += [lane_i[k].eq(i0), lane_j[k].eq(j0), nx_i[k].eq(i1), nx_j[k].eq(j1),
                             nx_sh[k].eq(i1 + j1), nx_en[k].eq(in_en2[k])]
        with m.If(cmd.go):
            m.d.sync += [busy.eq(1), last.eq(in_last), left.eq(in_npairs), r_nb.eq(in_nb)]

        # ---- the commands: the first pairs on ``go`` (from the widths), else the registers ---
        for k in range(lanes):
            m.d.comb += [cmd.sel_i[k].eq(Mux(cmd.go, first_i[k], nx_i[k])),
                         cmd.sel_j[k].eq(Mux(cmd.go, first_j[k], nx_j[k])),
                         cmd.sel_sh[k].eq(Mux(cmd.go, first_sh[k], nx_sh[k])),
                         cmd.sel_en[k].eq(Mux(cmd.go, in_en[k], nx_en[k]))]
        return m


class FMACDatapath(wiring.Component):
    """The multiply side of a chunked fMAC, run by a :class:`FMACSchedule`'s ``cmd``.

    On ``cmd.go`` the operands and ``tag`` are captured and each lane's chunk registers load
    the first step's chunks; every ``cmd.step`` adds the lanes' signed ``2b x 2b`` chunk
    products, shifted by ``2 * (i + j)``, into the partial sum; on ``cmd.finish`` the sum and
    the product's tag go to ``product`` / ``tag_out`` with ``done`` high in the next cycle
    (``latency = 1`` after the last step). Back-to-back products overlap as in
    :class:`hdl.fmac.FMACCore`: the next ``go`` may come in the ``finish`` cycle.

    A product's sign is the same for all its steps, so a step adds each lane's *unsigned*
    ``2b x 2b`` chunk product, shifted, as its one's complement when the product is negative,
    plus the lane count: ``psum + sum(term ^ -neg) + neg * lanes``, the two's complement
    ``psum - sum(term)`` (with one lane, one carry chain, ``neg`` on its carry-in; with more, a
    multi-operand sum with that small constant). The chunk product is
    a 4-input table of the lane's registered chunks, the shift an AND-OR by a one-hot register
    (cleared when the lane is not enabled), so a step is two LUT levels before the sum's carry
    chain (the signed 6-input product table and a binary shift select were five: the S = 8
    FPGA core's largest group of estimated paths, 26 end points in each of the 64 PEs). Number
    format: operands sign/magnitude integers, ``product`` an exact two's complement integer.

    Parameters
    ----------
    config : FMACConfig
    tag_bits : int
        Width of a user tag carried with each product from ``go`` to ``done`` (0: none).

    Members
    -------
    cmd : In(FMACStep(config))
    a_sign, b_sign : In(1)
    a_mag, b_mag : In(max_mantissa)
        The operands, read in the ``go`` cycle.
    tag : In(tag_bits)
        Read in the ``go`` cycle.
    done : Out(1)
        ``product`` holds a new product (one-cycle pulse).
    product : Out(signed(2*max_mantissa + 1))
    tag_out : Out(tag_bits)
        The tag given with that product.
    """

    #: cycles from a product's last step to ``done``
    LATENCY = 1

    def __init__(self, *, config: FMACConfig, tag_bits: int = 0):
        with used_if_rejected(self):
            _check_config("FMACDatapath", config)
            if isinstance(tag_bits, bool) or not isinstance(tag_bits, int) or tag_bits < 0:
                raise ValueError(f"FMACDatapath.tag_bits must be a non-negative int, not "
                                 f"{tag_bits!r}")
        self.config, self.tag_bits = config, tag_bits
        self.latency = self.LATENCY
        mm = config.max_mantissa
        super().__init__({
            "cmd": In(FMACStep(config)),
            "a_sign": In(1), "a_mag": In(mm),
            "b_sign": In(1), "b_mag": In(mm),
            "tag": In(tag_bits),
            "done": Out(1),
            "product": Out(signed(2 * mm + 1)),
            "tag_out": Out(tag_bits),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        mm = cfg.max_mantissa
        maxc = mm // 2
        lanes = cfg.lanes
        prod_shape = signed(2 * mm + 1)
        cmd = self.cmd

        def chunk(mag, k):
            return mag.word_select(k, 2) if maxc > 1 else mag[:2]

        r_amag = Signal(mm, name="r_amag")
        r_bmag = Signal(mm, name="r_bmag")
        r_neg = Signal(name="r_neg")
        r_tag = Signal(self.tag_bits, name="r_tag")
        psum = Signal(prod_shape, name="psum")
        nsh = 2 * maxc - 1                          # shifts 2 * (i + j), i + j < nsh
        pw = prod_shape.width
        lane_ca = [Signal(2, name=f"lane_{k}_ca") for k in range(lanes)]
        lane_cb = [Signal(2, name=f"lane_{k}_cb") for k in range(lanes)]
        # one-hot i + j (all zero when the lane is not enabled: its term is then 0)
        lane_sh = [Signal(nsh, name=f"lane_{k}_ij_onehot") for k in range(lanes)]

        # ---- this step: unsigned chunk products, shifted, complemented if negative, summed ---
        ones = Mux(r_neg, Const(-1, pw), Const(0, pw))
        terms = []
        for k in range(lanes):
            # ca * cb, a table of the four chunk bits (a `*` of two 2-bit values would be
            # mapped to a MULT18X18D by yosys)
            up = Signal(4, name=f"lane_{k}_uprod")
            with m.Switch(Cat(lane_ca[k], lane_cb[k])):
                for key in range(16):
                    if (key & 3) * (key >> 2):
                        with m.Case(key):
                            m.d.comb += up.eq((key & 3) * (key >> 2))
                with m.Default():
                    m.d.comb += up.eq(0)
            term = Signal(pw, name=f"lane_{k}_term")      # up << 2 * (i + j), or 0
            m.d.comb += term.eq(Cat(*[
                Cat(*[up[b - 2 * ij] & lane_sh[k][ij] for ij in range(nsh)
                      if 0 <= b - 2 * ij < 4]).any() for b in range(pw)]))
            terms.append(term ^ ones)
        # the negative lanes' +1s: the carry-in (one lane) or a small constant
        corr = r_neg if lanes == 1 else Mux(r_neg, lanes, 0)
        step_sum = Signal(prod_shape, name="step_sum")
        m.d.comb += step_sum.eq(sum(terms, psum) + corr)

        m.d.sync += self.done.eq(0)
        with m.If(cmd.finish):
            m.d.sync += [self.product.eq(step_sum), self.tag_out.eq(r_tag), self.done.eq(1)]
        with m.If(cmd.step):
            m.d.sync += psum.eq(step_sum)

        # ---- the next step's lanes (registered): from the captured operands, or on ``go``
        # from the inputs ----------------------------------------------------------------------
        src_a = Mux(cmd.go, self.a_mag, r_amag)
        src_b = Mux(cmd.go, self.b_mag, r_bmag)
        with m.If(cmd.go | cmd.step):
            for k in range(lanes):
                m.d.sync += [lane_ca[k].eq(chunk(src_a, cmd.sel_i[k])),
                             lane_cb[k].eq(chunk(src_b, cmd.sel_j[k])),
                             lane_sh[k].eq(Cat(*[cmd.sel_en[k] & (cmd.sel_sh[k] == ij)
                                                 for ij in range(nsh)]))]
        with m.If(cmd.go):
            m.d.sync += [psum.eq(0), r_amag.eq(self.a_mag), r_bmag.eq(self.b_mag),
                         r_neg.eq(self.a_sign ^ self.b_sign), r_tag.eq(self.tag)]
        return m
