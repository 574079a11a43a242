"""``grad_unit``: the gradient datapaths side by side in one top-level block (one Verilog
variant for the cocotb tier): :class:`Elementwise` (``ew_*``), :class:`BiasGrad` (``bg_*``),
:class:`SoftmaxXent` (``sx_*``). Ports are the sub-blocks' ports, prefixed."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..fp32.log_config import FP32LogConfig
from ..lib.mustuse import mark_used
from ..registry import Block
from .biasgrad import BG_CMD_LAYOUT, BG_OUT_LAYOUT, BiasGrad
from .config import GradConfig
from .elementwise import EW_IN_LAYOUT, EW_OUT_LAYOUT, Elementwise
from .softmax import SX_IN_LAYOUT, SX_OUT_LAYOUT, SoftmaxXent

__all__ = ["GradUnit"]


class GradUnit(wiring.Component):
    """Elementwise ops, bias gradient and softmax cross-entropy (independent, concurrent).

    Parameters
    ----------
    config : GradConfig
    fp32_config, divsqrt_config, log_config : unit configurations.

    Attributes
    ----------
    latency : dict
        ``{"elementwise", "biasgrad", "softmax"}``: each sub-block's ``latency``.

    Members
    -------
    ew_i, ew_o, ew_op, ew_scale : :class:`~hdl.grad.elementwise.Elementwise` ``i, o, op, scale``.
    bg_cmd, bg_dy, bg_db, bg_error : :class:`~hdl.grad.biasgrad.BiasGrad` ``cmd, dy, db, error``.
    sx_i, sx_o, sx_gscale : :class:`~hdl.grad.softmax.SoftmaxXent` ``i, o, gscale``.
    """

    def __init__(self, *, config: GradConfig | None = None,
                 fp32_config: FP32Config | None = None,
                 divsqrt_config: FP32DivSqrtConfig | None = None,
                 log_config: FP32LogConfig | None = None):
        self.config = config or GradConfig()
        self.fp32_config = fp32_config or FP32Config()
        self.divsqrt_config = divsqrt_config or FP32DivSqrtConfig()
        self.log_config = log_config or FP32LogConfig()
        # Sub-blocks are elaborated as part of this block (marked used as soon as made, so a
        # config error in a later one leaves no "never used" warning).
        try:
            self._ew = mark_used(Elementwise(fp32_config=self.fp32_config))
            self._bg = mark_used(BiasGrad(config=self.config, fp32_config=self.fp32_config))
            self._sx = mark_used(SoftmaxXent(config=self.config, fp32_config=self.fp32_config,
                                             divsqrt_config=self.divsqrt_config,
                                             log_config=self.log_config))
        except (ValueError, TypeError):
            mark_used(self)                  # rejected: no "never used" warning
            raise
        self.latency = {"elementwise": self._ew.latency, "biasgrad": self._bg.latency,
                        "softmax": self._sx.latency}
        super().__init__({
            "ew_i": In(stream.Signature(EW_IN_LAYOUT)),
            "ew_o": Out(stream.Signature(EW_OUT_LAYOUT)),
            "ew_op": In(3),
            "ew_scale": In(32),
            "bg_cmd": In(stream.Signature(BG_CMD_LAYOUT)),
            "bg_dy": In(stream.Signature(32)),
            "bg_db": Out(stream.Signature(BG_OUT_LAYOUT)),
            "bg_error": Out(1),
            "sx_i": In(stream.Signature(SX_IN_LAYOUT)),
            "sx_o": Out(stream.Signature(SX_OUT_LAYOUT)),
            "sx_gscale": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ew = ew = self._ew
        m.submodules.bg = bg = self._bg
        m.submodules.sx = sx = self._sx
        wiring.connect(m, wiring.flipped(self.ew_i), ew.i)
        wiring.connect(m, ew.o, wiring.flipped(self.ew_o))
        wiring.connect(m, wiring.flipped(self.bg_cmd), bg.cmd)
        wiring.connect(m, wiring.flipped(self.bg_dy), bg.dy)
        wiring.connect(m, bg.db, wiring.flipped(self.bg_db))
        wiring.connect(m, wiring.flipped(self.sx_i), sx.i)
        wiring.connect(m, sx.o, wiring.flipped(self.sx_o))
        m.d.comb += [ew.op.eq(self.ew_op), ew.scale.eq(self.ew_scale),
                     self.bg_error.eq(bg.error), sx.gscale.eq(self.sx_gscale)]
        return m


def _build(preset: str) -> GradUnit:
    return GradUnit(config=GradConfig.preset(preset), fp32_config=FP32Config.preset(preset),
                    divsqrt_config=FP32DivSqrtConfig.preset(preset),
                    log_config=FP32LogConfig.preset(preset))


def _params(preset: str) -> dict:
    u = _build(preset)
    mark_used(u)                             # built for its parameters only
    return {**u.config.to_dict(), "latency": u.latency["softmax"],
            "latencies": u.latency}


TESSERA_BLOCKS = [Block("grad_unit", build=_build, params=_params)]
