"""The unified FP32 optimizer update pipeline (SGD, momentum, Adam, AdamW).

Per element, in exactly this order (golden model: :meth:`sim.model.optim.OptimEngineModel.step`)::

    g  = (G * INV_SCALE) * CLIP
    m' = B1*m + OMB1*g
    v' = B2*v + OMB2*(g*g)
    d  = sqrt(v') * RC2 + EPS
    u  = g (SGD) | m' (momentum) | m' / d (Adam, AdamW)
    w' = w*WDEC - LR*u

Two taps let the optimizer engine use the same units for its one-shot computations instead of
units of its own (docs/datapaths.md): ``sq`` is ``g*g`` (the check pass's squares, with
``CLIP = 1`` so that ``g = G * INV_SCALE`` exactly), and with ``alt = 1`` the square root takes
``ALT_SQRT`` instead of ``v'`` and the divider ``ALT_NUM`` instead of ``m'``, so ``ratio`` is
``ALT_NUM / (sqrt(ALT_SQRT) * RC2 + EPS)`` (the clip factor's quotient with ``RC2 = 1``).
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import check_int
from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..lib.dataflow import Dataflow, check_units, unit_members, unit_ports
from ..lib.mustuse import used_if_rejected
from .config import Mode

__all__ = ["OptimDatapath", "datapath_in_layout", "datapath_out_layout", "HYPER_FIELDS",
           "ALT_FIELDS"]

#: FP32 hyperparameter inputs (constant during an update pass).
HYPER_FIELDS = ("inv_scale", "clip", "lr", "b1", "omb1", "b2", "omb2", "rc2", "eps", "wdec")
#: FP32 operands of the ``alt`` pass (constant during it): square-root operand and numerator.
ALT_FIELDS = ("alt_sqrt", "alt_num")


def datapath_in_layout(tag_bits: int) -> data.StructLayout:
    return data.StructLayout({"w": 32, "m": 32, "v": 32, "g": 32, "tag": tag_bits})


def datapath_out_layout(tag_bits: int) -> data.StructLayout:
    return data.StructLayout({"w": 32, "m": 32, "v": 32, "tag": tag_bits})


class OptimDatapath(wiring.Component):
    """Fixed-latency FP32 optimizer update, one element per ``ii`` cycles, never stalls.

    All values are IEEE binary32 bit patterns; every operation rounds to nearest even
    (bit-exact with numpy float32 in the order above).

    Parameters
    ----------
    tag_bits : int
        Width of the ``tag`` carried alongside each element (the memory address).
    fp32_config : FP32Config
    divsqrt_config : FP32DivSqrtConfig
    ii : int
        Initiation interval (:class:`~hdl.lib.dataflow.Dataflow`): with ``ii > 1`` elements
        may enter only in cycles congruent modulo ``ii`` (at most one every ``ii`` cycles),
        and the 10 multiplies share ``ceil(10 / ii)`` multipliers, the 4 adds ``ceil(4 /
        ii)`` adders. The results are the same words.
    units : tuple of str
        Kinds of shared units (``ii > 1`` only) that are outside the datapath, reached
        through :class:`~hdl.lib.dataflow.UnitPort` members ``unit_<kind><n>`` (the first
        shared units of each kind; default none). The training core's FPGA build puts a
        multiplier, the adder and the divider behind them, pooled with the vector unit's
        (:func:`~hdl.lib.dataflow.pool_unit`): the same timing and words, as long as nothing
        else issues to a pooled unit while the datapath runs.

    Attributes
    ----------
    latency : int
        Cycles from an input element to its output (with ``ii = 1`` the sum of the unit
        latencies on the critical path: 6 multiplies, 3 adds, sqrt, divide; with shared
        units, operations may wait for their unit's slot).
    sq_latency : int
        Cycles from an input element to its ``g*g`` on ``sq`` (3 multiplies).
    ratio_latency : int
        Cycles from an input element to its quotient on ``ratio`` (``latency`` less the
        ``LR`` multiply and the final subtraction).

    Members
    -------
    i : In(stream.Signature(datapath_in_layout, always_ready=True))
        ``w, m, v, g`` (FP32) and ``tag``; accepted every cycle it is valid.
    o : Out(stream.Signature(datapath_out_layout, always_ready=True))
        ``w', m', v'`` and the element's ``tag``, exactly ``latency`` cycles after input; the
        consumer must take it (it cannot stall).
    mode : In(2)
        :class:`~hdl.optim.config.Mode` (constant during a pass, and set at least one cycle
        before its first element: the datapath registers it).
    inv_scale, clip, lr, b1, omb1, b2, omb2, rc2, eps, wdec : In(32)
        FP32 hyperparameters (likewise constant during a pass and registered).
    alt : In(1)
        Square root of ``alt_sqrt`` and numerator ``alt_num`` instead of ``v'`` and ``m'``
        (constant during a pass and registered like ``mode``).
    alt_sqrt, alt_num : In(32)
        FP32 operands of an ``alt`` pass (registered like the hyperparameters).
    sq, ratio : Out(32)
        ``g*g`` of the element that entered ``sq_latency`` cycles earlier, and the divider's
        quotient of the one that entered ``ratio_latency`` cycles earlier (meaningful only in
        those cycles; the consumer delays the input's valid bit itself).
    """

    def __init__(self, *, tag_bits: int = 16, fp32_config: FP32Config | None = None,
                 divsqrt_config: FP32DivSqrtConfig | None = None, ii: int = 1,
                 units: tuple = ()):
        with used_if_rejected(self):
            check_int("OptimDatapath", "ii", ii, lo=1)
            units = self.check_units_for(units, fp32_config or FP32Config(),
                                         divsqrt_config or FP32DivSqrtConfig(), ii)
        self.ii = ii
        self.units = units
        self.tag_bits = tag_bits
        self.fp32_config = fp32_config or FP32Config()
        self.divsqrt_config = divsqrt_config or FP32DivSqrtConfig()
        sig = {
            "i": In(stream.Signature(datapath_in_layout(tag_bits), always_ready=True)),
            "o": Out(stream.Signature(datapath_out_layout(tag_bits), always_ready=True)),
            "mode": In(2),
            "alt": In(1),
            "sq": Out(32),
            "ratio": Out(32),
        }
        for name in HYPER_FIELDS + ALT_FIELDS:
            sig[name] = In(32)
        sig.update(unit_members(units))
        super().__init__(sig)
        self.latency, self.sq_latency, self.ratio_latency = self.latencies_for(
            self.fp32_config, self.divsqrt_config, ii)

    @classmethod
    def latency_for(cls, fp32_config: FP32Config, divsqrt_config: FP32DivSqrtConfig,
                    ii: int = 1) -> int:
        """The pipeline latency for these unit configurations (no hardware built)."""
        return cls.latencies_for(fp32_config, divsqrt_config, ii)[0]

    @classmethod
    def latencies_for(cls, fp32_config: FP32Config, divsqrt_config: FP32DivSqrtConfig,
                      ii: int = 1) -> tuple[int, int, int]:
        """``(latency, sq_latency, ratio_latency)`` for these unit configurations."""
        df = Dataflow(None, None, fp32_config=fp32_config, divsqrt_config=divsqrt_config,
                      ii=ii)
        w1, _, _, _, gg, q = cls._graph(df, {}, {}, None, None)
        return w1.t, gg.t, q.t

    @classmethod
    def unit_counts(cls, fp32_config: FP32Config, divsqrt_config: FP32DivSqrtConfig,
                    ii: int = 1) -> dict[str, int]:
        """FP32 units of each kind the datapath instantiates (no hardware built): with
        ``ii = 1`` 10 multipliers, 4 adders, a divider and a square root."""
        df = Dataflow(None, None, fp32_config=fp32_config, divsqrt_config=divsqrt_config,
                      ii=ii)
        cls._graph(df, {}, {}, None, None)
        return {k: df.units(k) for k in ("mul", "add", "div", "sqrt")}

    @classmethod
    def check_units_for(cls, units, fp32_config: FP32Config, divsqrt_config: FP32DivSqrtConfig,
                        ii: int, owner: str = "OptimDatapath") -> tuple:
        """``units`` checked (:func:`~hdl.lib.dataflow.check_units`: at most the shared
        units of each kind there are with this ``ii``); ``ValueError`` when given with
        ``ii = 1`` (an external unit would add a cycle to the latency)."""
        if units and ii == 1:
            raise ValueError(f"{owner}.units needs ii > 1 (shared units), not ii = 1")
        return check_units(owner, units, cls.unit_counts(fp32_config, divsqrt_config, ii))

    @staticmethod
    def _graph(df, inputs: dict, hyper: dict, mode, alt):
        w, mm, v, graw, tag = (df.input(inputs.get(n), n) for n in ("w", "m", "v", "g", "tag"))
        h = {n: df.const(hyper.get(n), n) for n in HYPER_FIELDS + ALT_FIELDS}
        u = df.mul(graw, h["inv_scale"], name="unscale")
        g = df.mul(u, h["clip"], name="clipped")
        bm = df.mul(h["b1"], mm, name="b1m")
        og = df.mul(h["omb1"], g, name="omb1g")
        m1 = df.add(bm, og, name="m_new")
        gg = df.mul(g, g, name="gsq")
        bv = df.mul(h["b2"], v, name="b2v")
        ogg = df.mul(h["omb2"], gg, name="omb2gsq")
        v1 = df.add(bv, ogg, name="v_new")
        sq = df.sqrt(df.select(alt, {1: h["alt_sqrt"]}, v1, name="sqrt_in"), name="sqrt_v")
        sr = df.mul(sq, h["rc2"], name="sqrt_v_rc2")
        den = df.add(sr, h["eps"], name="denom")
        q = df.div(df.select(alt, {1: h["alt_num"]}, m1, name="div_num"), den,
                   name="adam_ratio")
        upd = df.select(mode, {Mode.SGD: g, Mode.MOMENTUM: m1}, q, name="upd")
        lu = df.mul(h["lr"], upd, name="lr_upd")
        wd = df.mul(w, h["wdec"], name="w_decay")
        w1 = df.sub(wd, lu, name="w_new")
        return w1, m1, v1, tag, gg, q

    def elaborate(self, platform):
        m = Module()
        df = Dataflow(m, self.i.valid, fp32_config=self.fp32_config,
                      divsqrt_config=self.divsqrt_config, prefix="opt", ii=self.ii,
                      external=unit_ports(self, self.units))
        p = self.i.payload
        # Mode and hyperparameters are constant during a pass: the datapath takes its own
        # registered copies, so no path runs from the engine's registers (and its scale-exponent
        # arithmetic, the mode decode) into a unit's first step. The copy lags its input by one
        # cycle, which no element can see: the engine sets them before a pass and an element
        # reaches the datapath at least READ_LATENCY cycles after its read is issued.
        hyper = {}
        for n in HYPER_FIELDS + ALT_FIELDS:
            hyper[n] = Signal(32, name=f"{n}_r")
            m.d.sync += hyper[n].eq(getattr(self, n))
        mode = Signal.like(self.mode, name="mode_r")
        alt = Signal(name="alt_r")
        m.d.sync += [mode.eq(self.mode), alt.eq(self.alt)]
        w1, m1, v1, tag, gg, q = self._graph(
            df, {n: getattr(p, n) for n in ("w", "m", "v", "g", "tag")}, hyper, mode, alt)
        df.check_external_used()
        t_out = w1.t
        assert (t_out, gg.t, q.t) == (self.latency, self.sq_latency, self.ratio_latency)
        m.d.comb += [self.sq.eq(gg.value), self.ratio.eq(q.value)]
        m.d.comb += [
            self.o.valid.eq(df.valid_at(t_out)),
            self.o.payload.w.eq(df.at(w1, t_out)),
            self.o.payload.m.eq(df.at(m1, t_out)),
            self.o.payload.v.eq(df.at(v1, t_out)),
            self.o.payload.tag.eq(df.at(tag, t_out)),
        ]
        return m
