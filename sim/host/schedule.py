"""Precision schedules of a training run: the BFP mantissa width of every tensor of every layer
at every step, and the rounding of the backward passes.

A schedule decides, per step ``i`` of ``I`` (and its epoch), a width for each of a layer's three
tensor kinds -- ``x`` the activations (the layer's input), ``w`` its weights, ``g`` the output
gradients ``dY`` -- and turns them into the core's precision table (one ``(width_a, width_b,
rounding)`` entry per ``(layer, mode)``, docs/core.md), whose operands are::

    FWD         A = x   B = w       (Y = X . W)
    BWD_DATA    A = g   B = w       (dX = dY . W^T)
    BWD_WEIGHT  A = x   B = g       (dW = X^T . dY)

The rounding is per pass in the hardware (both operands of an entry): ``FWD`` always rounds to
nearest; the two backward passes (the gradient passes) round to nearest or stochastically
(``+sr``). The table is rewritten between steps without reloading the program.

Written as a string (``tessera train --widths``)::

    "8"  "6"  "4"  "2"        fixed: every tensor at that width
    "8,6,4"                   temporal stages over the epochs: they split evenly (earlier stages
                              get the extra epoch when they do not divide)
    "8,6,4@step"              the same stages over the steps (iterations) instead of the epochs
    "temporal-hl"             = "8,6,4": high to low (start accurate, lower later)
    "temporal-lh", "mixed"    = "4,6,8" and "2,4,8": low to high (FAST's order along iterations)
    "layer:8,4"               layerwise: layer 0 at 8, the last layer at 4, the layers between
                              interpolated (rounded down to an even width)
    "layer-hl", "layer-lh"    = "layer:8,4" and "layer:4,8" (FAST's order along depth)
    "xwg:4,8,6"               one fixed width per tensor kind: x 4, w 8, g 6
    "fast" or "fast:A,B"      FAST (:func:`fast_update`): needs the core's statistics
    any of these + "+sr"      the backward passes round stochastically (default nearest)

The widths must be the core's (``CoreConfig.array.widths``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD

__all__ = ["WidthSchedule", "MIXED", "NAMED", "KINDS", "OPERAND_KINDS", "ROUND_NEAREST",
           "ROUND_STOCHASTIC", "FAST_ALPHA", "FAST_BETA", "fast_threshold", "fast_update",
           "tensor_stats", "StatisticsMissing"]

#: The named mixed schedule: a third of the epochs at 2, 4 and 8 bits each.
MIXED = "2,4,8"
#: Named schedules (the baselines of the time-to-accuracy study, docs/tta.md).
NAMED = {"mixed": MIXED, "temporal-hl": "8,6,4", "temporal-lh": "4,6,8",
         "layer-hl": "layer:8,4", "layer-lh": "layer:4,8"}
#: Tensor kinds: activations, weights, output gradients.
KINDS = ("x", "w", "g")
#: The tensor kind of each operand of each pass: ``mode -> (width_a's, width_b's)`` (the
#: compiler's ``OPERAND_TENSORS`` in this module's kinds).
OPERAND_KINDS = {FWD: ("x", "w"), BWD_DATA: ("g", "w"), BWD_WEIGHT: ("x", "g")}
ROUND_NEAREST, ROUND_STOCHASTIC = 0, 1
#: FAST's threshold ``eps(l, i) = alpha - beta * i / I - beta * l / L`` (docs/tta.md says why).
FAST_ALPHA, FAST_BETA = 0.25, 0.1
_WIDTHS = (2, 4, 6, 8)


class StatisticsMissing(RuntimeError):
    """A FAST schedule was asked for a table without the core's statistics."""


def _check_width(w, what):
    if isinstance(w, bool) or not isinstance(w, int) or w not in _WIDTHS:
        raise ValueError(f"WidthSchedule.{what}: widths must be 2, 4, 6 or 8, not {w!r}")


def fast_threshold(layer: int, layers: int, i: int, iterations: int, alpha: float,
                   beta: float) -> float:
    """FAST's switching threshold ``eps(l, i) = alpha - beta * i / I - beta * l / L``."""
    return alpha - beta * i / iterations - beta * layer / layers


def fast_update(stats: dict, widths: dict, *, i: int, iterations: int, layers: int,
                alpha: float = FAST_ALPHA, beta: float = FAST_BETA,
                choices=_WIDTHS) -> dict:
    """FAST's decision after step ``i`` (pure): the new width of every tensor.

    ``stats``: ``{(layer, kind): r}`` with ``r = sum|BFP(X, m+2) - BFP(X, m)| / sum|BFP(X, m)|``
    read for the tensor quantized at its current width ``m`` (:func:`tensor_stats` of the
    core's statistics); ``widths``: ``{(layer, kind): m}``.
    A tensor whose ``r`` exceeds ``eps(l, i)`` (:func:`fast_threshold`) -- two more bits would
    still change it by more than the threshold -- moves to the next width of ``choices``; widths
    never fall, and a tensor with no statistic keeps its width. Returns a new dict.
    """
    if not isinstance(stats, dict) or not isinstance(widths, dict):
        raise TypeError("stats and widths must be dicts keyed by (layer, kind)")
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive int, not {iterations!r}")
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers must be a positive int, not {layers!r}")
    if not 0 <= i < iterations:
        raise ValueError(f"i must be in 0..{iterations - 1}, not {i!r}")
    choices = tuple(sorted(choices))
    out = dict(widths)
    for key, m in widths.items():
        layer, kind = key
        if kind not in KINDS or not 0 <= layer < layers:
            raise ValueError(f"widths key {key!r}: layer must be in 0..{layers - 1} and kind "
                             f"one of {KINDS}")
        if m not in choices:
            raise ValueError(f"widths[{key!r}] = {m!r} is not one of {choices}")
        r = stats.get(key)
        if r is None:
            continue
        if r > fast_threshold(layer, layers, i, iterations, alpha, beta):
            higher = [c for c in choices if c > m]
            if higher:
                out[key] = higher[0]
    return out


def tensor_stats(states: dict) -> dict:
    """Per-tensor FAST statistics ``{(layer, kind): r}`` from the core's per-slot ones.

    ``states``: ``{(layer, mode, operand): StatState}`` (``CoreModel.stat_states()``, the
    driver's ``("stats", key)``). A tensor is quantized by two passes (``x`` by ``FWD`` and
    ``BWD_WEIGHT``, ``w`` by ``FWD`` and ``BWD_DATA``, ``g`` by ``BWD_DATA`` and
    ``BWD_WEIGHT``: :data:`OPERAND_KINDS`); its ``r`` pools both slots' sums,
    ``sum_s num_s 2**exp_s / sum_s den_s 2**exp_s`` (exact integers, one division), i.e. the
    statistic of every group of the tensor the step quantized. Slots without a statistic
    (nothing quantized since the last clear, or a tensor at the top width) add nothing; a
    tensor with none has no entry (:func:`fast_update` keeps its width).
    """
    if not isinstance(states, dict):
        raise TypeError(f"states must be a dict {{(layer, mode, operand): StatState}}, not "
                        f"{type(states).__name__}")
    parts: dict = {}
    for key, st in states.items():
        layer, mode, op = key
        if mode not in OPERAND_KINDS or not st.seen or not st.den:
            continue
        parts.setdefault((layer, OPERAND_KINDS[mode][op]), []).append(st)
    out = {}
    for key, sts in parts.items():
        e0 = min(st.exp for st in sts)
        num = sum(st.num << (st.exp - e0) for st in sts)
        den = sum(st.den << (st.exp - e0) for st in sts)
        out[key] = num / den
    return out


@dataclass(frozen=True)
class WidthSchedule:
    """A precision schedule (see the module docstring for the string forms).

    Parameters
    ----------
    stages : tuple of int
        Temporal stages (a fixed schedule has one); with ``kind="layer"`` the widths of the
        first and the last layer; with ``kind="xwg"`` the widths of x, w and g; with
        ``kind="fast"`` the starting width of every tensor.
    kind : str
        ``"temporal"``, ``"layer"``, ``"xwg"`` or ``"fast"``.
    per : str
        ``"epoch"`` or ``"step"``: what the temporal stages split.
    grad_rounding : int
        Rounding of the ``BWD_DATA``/``BWD_WEIGHT`` passes: 0 nearest, 1 stochastic.
    alpha, beta : float
        FAST's threshold parameters (``kind="fast"`` only).
    """

    stages: tuple
    kind: str = "temporal"
    per: str = "epoch"
    grad_rounding: int = ROUND_NEAREST
    alpha: float = FAST_ALPHA
    beta: float = FAST_BETA

    def __post_init__(self):
        if not isinstance(self.stages, tuple) or not self.stages:
            raise ValueError(f"WidthSchedule.stages must be a non-empty tuple of widths, not "
                             f"{self.stages!r}")
        for w in self.stages:
            _check_width(w, "stages")
        if self.kind not in ("temporal", "layer", "xwg", "fast"):
            raise ValueError(f"WidthSchedule.kind must be temporal, layer, xwg or fast, not "
                             f"{self.kind!r}")
        want = {"layer": 2, "xwg": 3, "fast": 1}.get(self.kind)
        if want is not None and len(self.stages) != want:
            raise ValueError(f"WidthSchedule.stages: a {self.kind} schedule takes {want} "
                             f"width(s), not {self.stages!r}")
        if self.per not in ("epoch", "step"):
            raise ValueError(f"WidthSchedule.per must be 'epoch' or 'step', not {self.per!r}")
        if self.grad_rounding not in (ROUND_NEAREST, ROUND_STOCHASTIC):
            raise ValueError(f"WidthSchedule.grad_rounding must be 0 (nearest) or 1 "
                             f"(stochastic), not {self.grad_rounding!r}")
        for name in ("alpha", "beta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"WidthSchedule.{name} must be a finite number, not {v!r}")

    @classmethod
    def parse(cls, spec) -> "WidthSchedule":
        """From a string (module docstring), an int, or a :class:`WidthSchedule`."""
        if isinstance(spec, WidthSchedule):
            return spec
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls((spec,))
        if not isinstance(spec, str):
            raise TypeError(f"widths must be a string like '8', '4,8' or 'mixed', not "
                            f"{type(spec).__name__} {spec!r}")
        text = spec.strip().lower()
        rounding = ROUND_NEAREST
        if text.endswith("+sr"):
            text, rounding = text[:-3], ROUND_STOCHASTIC
        text = NAMED.get(text, text)
        per = "epoch"
        if text.endswith("@step"):
            text, per = text[:-5], "step"
        kind, alpha, beta = "temporal", FAST_ALPHA, FAST_BETA
        if ":" in text:
            kind, _, text = text.partition(":")
        elif text == "fast":
            kind, text = "fast", ""

        def ints(t):
            try:
                return tuple(int(p) for p in t.split(","))
            except ValueError:
                raise ValueError(f"widths must be comma-separated widths (e.g. '8' or '4,8'), "
                                 f"a named schedule {tuple(NAMED)}, 'layer:A,B', 'xwg:X,W,G' "
                                 f"or 'fast[:alpha,beta]', not {spec!r}") from None
        if kind == "fast":
            if text:
                try:
                    alpha, beta = (float(p) for p in text.split(","))
                except ValueError:
                    raise ValueError(f"'fast:alpha,beta' needs two numbers, not {spec!r}") \
                        from None
            return cls((2,), kind="fast", per="step", grad_rounding=rounding, alpha=alpha,
                       beta=beta)
        if kind not in ("temporal", "layer", "xwg"):
            raise ValueError(f"unknown schedule kind {kind!r} in {spec!r} (layer, xwg, fast)")
        return cls(ints(text), kind=kind, per=per, grad_rounding=rounding)

    def check(self, widths) -> None:
        """Every width this schedule can use is one of the core's ``widths``."""
        used = set(self.stages) | ({w for w in _WIDTHS if w >= self.stages[0]}
                                   if self.kind == "fast" else set())
        bad = sorted(w for w in used if w not in widths)
        if bad:
            raise ValueError(f"widths {bad} are not the core's widths {tuple(widths)}")

    @property
    def uniform(self) -> bool:
        """Every tensor of every layer has the same width at each step."""
        return self.kind == "temporal" or (self.kind != "fast" and len(set(self.stages)) == 1)

    @property
    def needs_statistics(self) -> bool:
        return self.kind == "fast"

    def _stage(self, pos: int, total: int) -> int:
        n = len(self.stages)
        base, extra = divmod(total, n)
        end = 0
        for k, w in enumerate(self.stages):
            end += base + (1 if k < extra else 0)
            if pos < end:
                return w
        return self.stages[-1]

    def width(self, epoch: int, epochs: int, step: int = 0, steps: int = 1) -> int:
        """The width of a temporal (or fixed) schedule at ``epoch`` (0-based) of ``epochs``,
        step ``step`` of the run's ``steps`` (used when ``per == "step"``)."""
        if self.kind != "temporal":
            raise ValueError(f"a {self.kind} schedule has no single width; use widths()")
        return self._stage(step, steps) if self.per == "step" else self._stage(epoch, epochs)

    def widths(self, layers: int, *, epoch: int, epochs: int, step: int = 0, steps: int = 1,
               current: dict | None = None) -> dict:
        """``{(layer, kind): width}`` at this point of the run. A FAST schedule returns
        ``current`` (its state, advanced by :meth:`advance`), or its starting widths."""
        if self.kind == "temporal":
            w = self.width(epoch, epochs, step, steps)
            return {(l, k): w for l in range(layers) for k in KINDS}
        if self.kind == "xwg":
            return {(l, k): w for l in range(layers) for k, w in zip(KINDS, self.stages)}
        if self.kind == "layer":
            first, last = self.stages
            out = {}
            for l in range(layers):
                f = first + (last - first) * (l / (layers - 1) if layers > 1 else 0.0)
                w = max(2, 2 * math.floor(f / 2 + 1e-9))
                out.update({(l, k): w for k in KINDS})
            return out
        if current is not None:
            return dict(current)
        return {(l, k): self.stages[0] for l in range(layers) for k in KINDS}

    def advance(self, current: dict, stats: dict | None, *, step: int, steps: int,
                layers: int) -> dict:
        """The FAST state after step ``step``: :func:`fast_update` on the core's statistics.
        ``stats``: ``{(layer, kind): r}`` (:func:`tensor_stats`). Other schedules return
        ``current``. Raises :class:`StatisticsMissing` without them."""
        if self.kind != "fast":
            return current
        if stats is None:
            raise StatisticsMissing("the FAST schedule needs the core's per-tensor statistics "
                                    "r(X), which this core does not provide")
        return fast_update(stats, current, i=step, iterations=steps, layers=layers,
                           alpha=self.alpha, beta=self.beta)

    def table(self, widths: dict, layers: int) -> dict:
        """The precision table ``{(layer, mode): (width_a, width_b, rounding)}`` of
        ``widths`` (from :meth:`widths`): the argument of ``Compiled.precision_table``."""
        g = self.grad_rounding
        out = {}
        for l in range(layers):
            for mode, (a, b) in OPERAND_KINDS.items():
                out[(l, mode)] = (widths[(l, a)], widths[(l, b)],
                                  ROUND_NEAREST if mode == FWD else g)
        return out

    def program(self, program) -> list:
        """The step program a run of this schedule loads: ``program`` (the compiler's) as is,
        or for FAST with ``ADAPT`` at its top. The run leaves the thresholds at their reset
        value (``THRESH_NEVER``), so ``ADAPT`` raises nothing: it clears the statistics, and
        the statistics the host reads after a step are that step's alone (docs/tta.md). The
        host decides and rewrites the table (``PREC``) between steps."""
        from hdl.core.isa import Op, encode
        return ([encode(Op.ADAPT)] if self.kind == "fast" else []) + list(program)

    def precision(self, layers: int, *, epoch: int, epochs: int, step: int = 0,
                  steps: int = 1, current: dict | None = None) -> dict:
        """:meth:`table` of :meth:`widths`."""
        return self.table(self.widths(layers, epoch=epoch, epochs=epochs, step=step,
                                      steps=steps, current=current), layers)

    def __str__(self) -> str:
        sr = "+sr" if self.grad_rounding == ROUND_STOCHASTIC else ""
        if self.kind == "fast":
            return f"fast:{self.alpha:g},{self.beta:g}{sr}"
        text = ",".join(map(str, self.stages))
        if self.kind != "temporal":
            text = f"{self.kind}:{text}"
        return text + ("@step" if self.per == "step" and self.kind == "temporal" else "") + sr
