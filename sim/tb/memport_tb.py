"""A Python memory image served to :class:`hdl.lib.memport.LinePort` clients in Amaranth's
simulator (fast-tier tests of anything that reaches the scratchpad through line ports).

The image is a ``numpy.uint32`` array of shape ``(lines, S)`` (``sim.model.vector`` layout),
shared by every attached port and updated in place. Timing is the LinePort contract:

* a cycle with ``r_en = 1`` puts line ``r_addr`` on ``r_data`` in the next cycle (not
  transparent: a write in the same cycle, through any port, is not seen); ``r_data`` holds
  while ``r_en = 0``;
* ``w_en`` (one bit per word) writes the selected words of ``w_data`` at the clock edge. Writes
  of several ports in one cycle are applied in the order the ports were given.

With ``latency=2`` every access is performed one edge later (read data two cycles after
``r_en``, a write one edge late): the scratchpad's ``registered`` clients
(:class:`hdl.core.scratchpad.Scratchpad`). With ``latency=3`` the read data comes one cycle
later again (the memory is read at the same edge as with 2): clients both ``registered``
and ``out_registered`` (``CoreConfig.spad_latency``).

A port may also be any object with only the read members (``r_en, r_addr, r_data``) or only
the write members (``w_en, w_addr, w_data``) of a LinePort, e.g. an engine's internal reader.

Every access is logged (``reads[name]`` / ``writes[name]``: sets of line addresses) so a test
can check which lines a port touched; an address outside the image is recorded in ``errors``
(and not performed) instead of raising inside the simulator.

Usage::

    mem = LineMemory(image, {"a": dut.a, "d": dut.d})
    run_sim(dut, testbench, processes=[mem.process])
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Const

__all__ = ["LineMemory", "pack_line", "unpack_line"]


def pack_line(words) -> int:
    """Words (lane 0 first) as the integer of a ``32 * S``-bit ``r_data``/``w_data``."""
    v = 0
    for j, w in enumerate(words):
        v |= (int(w) & 0xFFFFFFFF) << (32 * j)
    return v


def unpack_line(value: int, S: int) -> list[int]:
    return [(int(value) >> (32 * j)) & 0xFFFFFFFF for j in range(S)]


class LineMemory:
    """Serve ``image`` to the LinePort interfaces in ``ports`` (``{name: port}``, each port a
    client-side LinePort interface of the DUT, e.g. ``dut.a``)."""

    def __init__(self, image: np.ndarray, ports: dict, *, latency: int = 1):
        if not isinstance(image, np.ndarray) or image.dtype != np.uint32 or image.ndim != 2:
            raise TypeError("image must be a 2-D numpy uint32 array (lines, S)")
        if latency not in (1, 2, 3):
            raise ValueError(f"LineMemory.latency must be 1, 2 or 3, not {latency!r}")
        self.latency = latency
        self.image = image
        self.S = image.shape[1]
        self.ports = dict(ports)
        for name, p in self.ports.items():
            rd, wr = hasattr(p, "r_en"), hasattr(p, "w_en")
            if not (rd or wr) or (rd and len(p.r_data) != 32 * self.S) \
                    or (wr and len(p.w_en) != self.S):
                raise ValueError(f"port {name!r} is not a LinePort of {self.S} words")
        self.reads = {n: set() for n in self.ports}
        self.writes = {n: set() for n in self.ports}
        self.errors: list[str] = []
        self.cycles = 0

    def _ok(self, name, kind, addr):
        if addr >= self.image.shape[0]:
            self.errors.append(f"cycle {self.cycles}: port {name} {kind} line {addr} outside "
                               f"the image ({self.image.shape[0]} lines)")
            return False
        return True

    async def process(self, ctx):
        """The simulator process (add it with ``processes=[mem.process]``: background)."""
        sigs = []
        for p in self.ports.values():
            sigs += [getattr(p, n, Const(0)) for n in ("r_en", "r_addr", "w_en", "w_addr",
                                                       "w_data")]
        late = None                   # latency >= 2: the requests sampled at the edge before
        out = []                      # latency 3: the read data of the edge before
        async for _, _, *vals in ctx.tick().sample(*sigs):
            self.cycles += 1
            for p, line in out:
                ctx.set(p.r_data, line)
            out = []
            if self.latency >= 2:
                vals, late = late, vals
                if vals is None:
                    continue
            per = [vals[5 * k:5 * k + 5] for k in range(len(self.ports))]
            # reads first: they see the memory before this edge's writes
            for (name, p), (r_en, r_addr, *_rest) in zip(self.ports.items(), per):
                if r_en and self._ok(name, "read", r_addr):
                    self.reads[name].add(int(r_addr))
                    line = pack_line(self.image[r_addr])
                    if self.latency == 3:
                        out.append((p, line))
                    else:
                        ctx.set(p.r_data, line)
            for (name, p), (_re, _ra, w_en, w_addr, w_data) in zip(self.ports.items(), per):
                if w_en and self._ok(name, "write", w_addr):
                    self.writes[name].add(int(w_addr))
                    words = unpack_line(w_data, self.S)
                    for j in range(self.S):
                        if (w_en >> j) & 1:
                            self.image[w_addr, j] = words[j]
