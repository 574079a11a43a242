"""Chunked fMAC: run-time-width sign/magnitude multiply-accumulate (docs/fmac.md).

A ``m``-bit magnitude is split into ``m/2`` 2-bit chunks. A ``m_a x m_b`` product is the
shifted sum of the ``(m_a/2)*(m_b/2)`` chunk products ``a_i * b_j << 2*(i+j)``. The fMAC has
``lanes`` 2b x 2b chunk multipliers, so one product takes
``ceil((m_a/2)*(m_b/2) / lanes)`` cycles: the *beat* of a product. Widths are run-time inputs.

* :class:`FMACCore` - no streams; one product per beat, back to back: a
  :class:`hdl.fmac_step.FMACSchedule` and a :class:`hdl.fmac_step.FMACDatapath` (a systolic
  array's PEs use the datapath alone, one schedule per PE row) and an accumulator.
* :class:`FMAC` - a stream block for standalone use: operand pairs in, exact dot products out.

Both are bit-exact with :mod:`sim.model.fmac`. See ``docs/fmac.md``.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .config import FMACConfig
from .fmac_step import FMACDatapath, FMACSchedule, fmac_width_shape as _width_shape
from .registry import Block

__all__ = ["FMACCore", "FMAC", "product_cycles", "fmac_operand_layout", "fmac_result_layout"]


def product_cycles(m_a: int, m_b: int, lanes: int) -> int:
    """Cycles one ``m_a x m_b`` product takes on ``lanes`` chunk multipliers (its beat)."""
    pairs = (m_a // 2) * (m_b // 2)
    return -(-pairs // lanes)


def fmac_operand_layout(config: FMACConfig) -> data.StructLayout:
    """Payload of :class:`FMAC`'s ``i`` stream (LSB first, in this order)."""
    m = config.max_mantissa
    w = _width_shape(config)
    return data.StructLayout({
        "a_mag": unsigned(m), "a_sign": 1,
        "b_mag": unsigned(m), "b_sign": 1,
        "width_a": w, "width_b": w,
        "last": 1,
    })


def fmac_result_layout(config: FMACConfig) -> data.StructLayout:
    """Payload of :class:`FMAC`'s ``o`` stream: ``value`` (signed ``acc_bits``) | ``overflow``."""
    return data.StructLayout({"value": signed(config.acc_bits), "overflow": 1})


class FMACCore(wiring.Component):
    """Chunked multiply-accumulate engine without streams (the systolic-array PE's MAC).

    Protocol (all signals in the ``sync`` domain):

    * When ``ready`` is 1, asserting ``start`` for one cycle begins a product of the operands
      (``a_*``, ``b_*``, ``width_*``, ``accumulate``, ``last``) present **in that same cycle**;
      they are captured, so they may change afterwards. ``start`` while ``ready`` is 0 is
      ignored.
    * A product started in cycle ``t`` runs its ``B = cycles(width_a, width_b, lanes)`` chunk
      steps in cycles ``t+1 .. t+B``. ``done`` is 1 for exactly one cycle, cycle
      ``t + B + latency`` (``latency = 1``), and ``product``/``product_last`` hold the result
      from then until the next product completes.
    * ``ready`` is 1 when idle and in the cycle of a product's last step (cycle ``t + B``), so
      starting whenever ``ready`` is 1 gives back-to-back products, one per beat of ``B``
      cycles: every PE of an array can start together every ``B`` cycles (lockstep).
    * The accumulator is updated at the end of the ``done`` cycle: ``acc``/``overflow`` show the
      product from cycle ``t + B + latency + acc_latency`` (``acc_latency = 1``). With
      ``accumulate = 0`` the accumulator is *replaced* by the product and ``overflow`` cleared
      (first product of a dot product); with ``accumulate = 1`` it becomes
      ``sat(acc + product)``.
    * Overflow policy: the accumulator saturates to ``[-2**(acc_bits-1), 2**(acc_bits-1)-1]``;
      ``overflow`` is a sticky flag set whenever a sum had to be clamped. Nothing wraps.
    * ``clear`` (any cycle) zeroes ``acc`` and ``overflow`` at the end of the cycle, taking
      priority over an accumulator update in the same cycle (``product``/``done`` unaffected).

    Widths: ``width_a``/``width_b`` hold the mantissa width ``m`` in {2, 4, ..., max_mantissa}
    and are chosen per product at run time. The hardware uses ``clamp(width // 2, 1,
    max_mantissa // 2)`` chunks, so other codes behave like the nearest legal width below (0 and
    1 like 2); magnitude bits at and above the used width are ignored.

    Number format: operands are sign/magnitude integers (BFP elements without their shared
    exponent); ``product`` and ``acc`` are two's complement integers, exact.

    Datapath: every step multiplies ``lanes`` chunk pairs whose chunks, shifts and enables
    were selected into registers in the previous cycle; each lane's signed 2b x 2b product
    (a 6-input table of sign, enable and the two chunks, so no negation carry chain) is
    shifted by
    ``2*(i+j)`` and added into the signed partial sum.

    Parameters
    ----------
    config : FMACConfig
        ``max_mantissa``, ``lanes``, ``acc_bits``.

    Members
    -------
    start : In(1)
        Begin a product with this cycle's operands (honoured when ``ready``).
    a_sign, b_sign : In(1)
        Operand signs (1 = negative).
    a_mag, b_mag : In(max_mantissa)
        Operand magnitudes.
    width_a, width_b : In(unsigned(4)) (3 bits when ``max_mantissa`` < 8)
        Run-time mantissa widths ``m`` of the operands.
    accumulate : In(1)
        0: the product replaces the accumulator (and clears ``overflow``); 1: it is added.
    last : In(1)
        A user flag carried with the product to ``product_last`` (e.g. end of a dot product).
    clear : In(1)
        Zero ``acc`` and ``overflow``.
    ready : Out(1)
        ``start`` is accepted this cycle (idle, or the current product's last step).
    busy : Out(1)
        A chunk step runs this cycle.
    done : Out(1)
        ``product`` holds a new product (one-cycle pulse).
    product : Out(signed(2*max_mantissa + 1))
        The last completed signed product.
    product_last : Out(1)
        The ``last`` flag given with that product.
    acc : Out(signed(acc_bits))
        Saturating accumulator.
    overflow : Out(1)
        Sticky: the accumulator saturated since the last ``accumulate = 0`` product or ``clear``.
    """

    #: cycles from the end of a product's beat (its last step) to ``done``/``product``
    LATENCY = FMACDatapath.LATENCY
    #: extra cycles from ``done`` to ``acc``/``overflow`` showing the product
    acc_latency = 1

    def __init__(self, *, config: FMACConfig | None = None):
        config = FMACConfig() if config is None else config
        if not isinstance(config, FMACConfig):
            self._MustUse__silence = True        # no "never used" warning for a rejected object
            raise TypeError(f"FMACCore.config must be an FMACConfig, not {config!r}")
        self.config = config
        m = config.max_mantissa
        w = _width_shape(config)
        self.latency = self.LATENCY
        super().__init__({
            "start": In(1),
            "a_sign": In(1), "a_mag": In(m),
            "b_sign": In(1), "b_mag": In(m),
            "width_a": In(w), "width_b": In(w),
            "accumulate": In(1),
            "last": In(1),
            "clear": In(1),
            "ready": Out(1),
            "busy": Out(1),
            "done": Out(1),
            "product": Out(signed(2 * m + 1)),
            "product_last": Out(1),
            "acc": Out(signed(config.acc_bits)),
            "overflow": Out(1),
        })

    @staticmethod
    def cycles(m_a: int, m_b: int, lanes: int) -> int:
        """Cycles (the beat) of one ``m_a x m_b`` product with ``lanes`` chunk multipliers."""
        return product_cycles(m_a, m_b, lanes)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        sched = m.submodules.schedule = FMACSchedule(config=cfg)
        dp = m.submodules.datapath = FMACDatapath(config=cfg, tag_bits=2)
        wiring.connect(m, sched.cmd, dp.cmd)
        m.d.comb += [
            sched.start.eq(self.start),
            sched.width_a.eq(self.width_a), sched.width_b.eq(self.width_b),
            self.ready.eq(sched.ready), self.busy.eq(sched.busy),
            dp.a_sign.eq(self.a_sign), dp.a_mag.eq(self.a_mag),
            dp.b_sign.eq(self.b_sign), dp.b_mag.eq(self.b_mag),
            dp.tag.eq(Cat(self.last, self.accumulate)),
            self.done.eq(dp.done), self.product.eq(dp.product),
            self.product_last.eq(dp.tag_out[0]),
        ]
        # done_accum: the finished product's accumulate flag, for the accumulator stage
        done_accum = dp.tag_out[1]

        # ---- saturating accumulator (the cycle after `done`) ----------------------------------
        ab = cfg.acc_bits
        lo, hi = -(1 << (ab - 1)), (1 << (ab - 1)) - 1
        total = Signal(signed(ab + 1), name="acc_sum")
        m.d.comb += total.eq(Mux(done_accum, self.acc, 0) + self.product)
        pos_ovf = Signal(name="acc_pos_ovf")
        neg_ovf = Signal(name="acc_neg_ovf")
        m.d.comb += [pos_ovf.eq(~total[ab] & total[ab - 1]),     # sum fits ab+1 bits: the
                     neg_ovf.eq(total[ab] & ~total[ab - 1])]     # top two bits differ
        acc_next = Signal(signed(ab), name="acc_next")
        ovf_next = Signal(name="ovf_next")
        m.d.comb += [
            acc_next.eq(Mux(pos_ovf, hi, Mux(neg_ovf, lo, total[:ab]))),
            ovf_next.eq(pos_ovf | neg_ovf | (self.overflow & done_accum)),
        ]
        with m.If(self.done | self.clear):
            m.d.sync += [self.acc.eq(Mux(self.clear, 0, acc_next)),
                         self.overflow.eq(ovf_next & ~self.clear)]
        return m


class FMAC(wiring.Component):
    """Stream wrapper of :class:`FMACCore`: operand pairs in, exact dot products out.

    Every ``i`` transfer is one operand pair with its own run-time widths (widths may change
    from element to element; a dot product with one width pair is the common case). The
    element with ``last = 1`` ends a dot product; its saturated sum and the sticky overflow
    flag leave on ``o``. The next element starts a new dot product.

    Timing: with the output ready and the result FIFO empty, operands are accepted back to back,
    one per beat: the element accepted in cycle ``t`` blocks ``i`` until cycle
    ``t + product_cycles(width_a, width_b, lanes)``. The result of a dot product whose last
    element is accepted in cycle ``t`` is valid on ``o`` in cycle ``t + beat + latency``
    (``latency = 3``: the core's product register, the accumulator update, then the result
    FIFO). A 4-entry result FIFO with
    credit counting keeps ``i`` flowing while results wait; under backpressure ``i.ready``
    drops only when the results in flight plus those queued would exceed the FIFO.

    Stream rules: ``o.valid`` is a register output (never depends on ``o.ready``), payloads
    are held while not taken, nothing is dropped. ``i.ready`` depends only on state.

    Parameters
    ----------
    config : FMACConfig

    Payloads are plain bit vectors holding the struct layouts :func:`fmac_operand_layout` and
    :func:`fmac_result_layout` (``data.View(layout, payload)`` reads them), so every payload bit
    is a Verilog port.

    Members
    -------
    i : In(stream.Signature(unsigned(fmac_operand_layout(config).size)))
        ``a_mag``, ``a_sign``, ``b_mag``, ``b_sign`` (sign/magnitude operands), ``width_a``,
        ``width_b`` (run-time mantissa widths in {2, 4, ..., max_mantissa}), ``last``.
    o : Out(stream.Signature(unsigned(fmac_result_layout(config).size)))
        ``value`` (signed ``acc_bits``, exact unless saturated), ``overflow`` (the sum saturated).
    """

    #: result FIFO depth (results in flight + queued never exceed it)
    RESULT_DEPTH = 4
    #: cycles from the end of the last element's beat to ``o.valid`` (FIFO empty)
    LATENCY = FMACCore.LATENCY + FMACCore.acc_latency + 1

    def __init__(self, *, config: FMACConfig | None = None):
        config = FMACConfig() if config is None else config
        if not isinstance(config, FMACConfig):
            self._MustUse__silence = True        # no "never used" warning for a rejected object
            raise TypeError(f"FMAC.config must be an FMACConfig, not {config!r}")
        self.config = config
        self.latency = self.LATENCY
        super().__init__({
            "i": In(stream.Signature(unsigned(fmac_operand_layout(config).size))),
            "o": Out(stream.Signature(unsigned(fmac_result_layout(config).size))),
        })

    def cycles(self, m_a: int, m_b: int) -> int:
        """Cycles between accepted operands (the beat) for one ``m_a x m_b`` product."""
        return product_cycles(m_a, m_b, self.config.lanes)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        depth = self.RESULT_DEPTH
        core = m.submodules.core = FMACCore(config=cfg)
        res_layout = fmac_result_layout(cfg)
        fifo = m.submodules.results = SyncFIFO(width=res_layout.size, depth=depth)

        first = Signal(init=1, name="first")          # next element starts a dot product
        push = Signal(name="push")                   # acc holds a finished dot product
        inflight = Signal(range(depth + 1), name="inflight")

        p = data.View(fmac_operand_layout(cfg), self.i.payload)
        accept = Signal(name="accept")
        m.d.comb += [
            self.i.ready.eq(core.ready & (inflight + fifo.level < depth)),
            accept.eq(self.i.valid & self.i.ready),
            core.start.eq(accept),
            core.a_sign.eq(p.a_sign), core.a_mag.eq(p.a_mag),
            core.b_sign.eq(p.b_sign), core.b_mag.eq(p.b_mag),
            core.width_a.eq(p.width_a), core.width_b.eq(p.width_b),
            core.accumulate.eq(~first),
            core.last.eq(p.last),
            core.clear.eq(0),
        ]
        with m.If(accept):
            m.d.sync += first.eq(p.last)
        m.d.sync += push.eq(core.done & core.product_last)

        res = Signal(res_layout, name="result")
        m.d.comb += [
            res.value.eq(core.acc), res.overflow.eq(core.overflow),
            fifo.w_data.eq(res.as_value()),
            fifo.w_en.eq(push),
            self.o.valid.eq(fifo.r_rdy),
            self.o.payload.eq(fifo.r_data),
            fifo.r_en.eq(self.o.ready),
        ]
        inc = accept & p.last
        with m.If(inc & ~push):
            m.d.sync += inflight.eq(inflight + 1)
        with m.Elif(push & ~inc):
            m.d.sync += inflight.eq(inflight - 1)
        return m


def layout_fields(layout: data.StructLayout) -> dict:
    """``{field: [offset, width]}`` of a struct layout (for software packing)."""
    return {name: [field.offset, field.width] for name, field in layout}


def _fmac_params(config: FMACConfig) -> dict:
    widths = config.widths
    return {
        **config.to_dict(),
        "latency": FMAC.LATENCY,
        "core_acc_latency": FMACCore.acc_latency,
        "result_fifo_depth": FMAC.RESULT_DEPTH,
        "i_payload_bits": fmac_operand_layout(config).size,
        "o_payload_bits": fmac_result_layout(config).size,
        "i_layout": layout_fields(fmac_operand_layout(config)),
        "o_layout": layout_fields(fmac_result_layout(config)),
        "product_bits": 2 * config.max_mantissa + 1,
        "cycles_per_product": {f"{a}x{b}": product_cycles(a, b, config.lanes)
                               for a in widths for b in widths},
    }


def _fmac_block(name: str, lanes: int | None):
    import dataclasses

    def config(preset):
        cfg = FMACConfig.preset(preset)
        return cfg if lanes is None else dataclasses.replace(cfg, lanes=lanes)

    return Block(
        name=name,
        build=lambda preset: FMAC(config=config(preset)),
        params=lambda preset: _fmac_params(config(preset)),
    )


#: "fmac": the preset's lanes (1); "fmac_lanes2"/"fmac_lanes4": the same preset with 2 or 4
#: chunk multipliers (Verilator builds them only when a test or the bench asks).
TESSERA_BLOCKS = [
    _fmac_block("fmac", None),
    _fmac_block("fmac_lanes2", 2),
    _fmac_block("fmac_lanes4", 4),
]
