"""Width schedules of a training run: which BFP mantissa widths each epoch's matmul passes use.

A schedule is written as a string:

``"8"``        every pass at 8/8 bits (nearest rounding), every epoch;
``"4,8"``      temporal stages: the epochs split evenly (earlier stages get the extra epoch
               when they do not divide) -- 4 bits first, then 8 (low precision first, accurate
               second, the order FAST uses);
``"mixed"``    the named mixed schedule :data:`MIXED` (``"2,4,8"``).

The widths must be the core's (``CoreConfig.array.widths``). :meth:`WidthSchedule.precision`
returns the argument of :meth:`sim.host.compiler.Compiled.precision_table` (a width, so the
precision table is rewritten between steps without reloading the program).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WidthSchedule", "MIXED"]

#: The named mixed schedule: a third of the epochs at 2, 4 and 8 bits each.
MIXED = "2,4,8"


@dataclass(frozen=True)
class WidthSchedule:
    stages: tuple

    def __post_init__(self):
        if not isinstance(self.stages, tuple) or not self.stages:
            raise ValueError(f"WidthSchedule.stages must be a non-empty tuple of widths, not "
                             f"{self.stages!r}")
        for w in self.stages:
            if isinstance(w, bool) or not isinstance(w, int) or not 2 <= w <= 8 or w % 2:
                raise ValueError(f"WidthSchedule.stages: widths must be 2, 4, 6 or 8, not {w!r}")

    @classmethod
    def parse(cls, spec) -> "WidthSchedule":
        """From ``"8"``, ``"4,8"``, ``"mixed"`` or an int."""
        if isinstance(spec, WidthSchedule):
            return spec
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls((spec,))
        if not isinstance(spec, str):
            raise TypeError(f"widths must be a string like '8', '4,8' or 'mixed', not "
                            f"{type(spec).__name__} {spec!r}")
        text = MIXED if spec.strip().lower() == "mixed" else spec
        try:
            stages = tuple(int(p) for p in text.split(","))
        except ValueError:
            raise ValueError(f"widths must be comma-separated widths (e.g. '8' or '4,8') or "
                             f"'mixed', not {spec!r}") from None
        return cls(stages)

    def check(self, widths) -> None:
        bad = [w for w in self.stages if w not in widths]
        if bad:
            raise ValueError(f"widths {bad} are not the core's widths {tuple(widths)}")

    def width(self, epoch: int, epochs: int) -> int:
        """The width of ``epoch`` (0-based) in a run of ``epochs`` epochs."""
        n = len(self.stages)
        base, extra = divmod(epochs, n)
        end = 0
        for i, w in enumerate(self.stages):
            end += base + (1 if i < extra else 0)
            if epoch < end:
                return w
        return self.stages[-1]

    def precision(self, epoch: int, epochs: int):
        return self.width(epoch, epochs)

    def __str__(self) -> str:
        return ",".join(map(str, self.stages))
