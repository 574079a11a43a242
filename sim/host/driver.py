"""Host driver of the training core's command protocol (hdl/core/host.py), shared by both test
tiers and the training run.

The driver turns *host actions* into host commands, packed with the hardware's own layouts
(:func:`hdl.core.host.host_cmd_layout`), and unpacks the responses. The same action lists
drive the golden model (:meth:`sim.model.core.CoreModel.apply`), so an RTL run and a golden
run are driven identically:

``("write", line, words)``        words: ``(n, S)`` uint32, written to lines ``line..line+n-1``
``("read", key, line, n)``        the ``(n, S)`` uint32 lines, stored under ``key``
``("program", words)``            program words from pc 0
``("prec", layer, mode, wa, wb, rounding)``   one precision-table entry
``("setreg", reg, bits)``         an optimizer register (``hdl.optim.config.Reg``)
``("thresh", layer, mode, op, t)``  an ADAPT threshold (Q16.16; docs/fast.md)
``("stats", key)``                every FAST statistic, ``{(layer, mode, op): StatState}``
``("run",)``                      START; ``(status, err_pc)`` appended to the list under ``"run"``
``("status",)``                   optimizer status dict under ``"status"``
``("counters",)``                 the core's counters dict under ``"counters"`` (RTL only)

A *transport* moves payloads: ``await transport.transact(cmds, deadline)`` sends the command
payloads (ints) in order and returns the response payloads (ints) in order; it must keep the
command stream busy while responses are collected, so WRITE/READ stream at a line per cycle.
``deadline`` is a cycle budget: a transport raises :class:`TimeoutError` when it runs out (a
hang is a failure, not a stuck run).
"""
from __future__ import annotations

import numpy as np

from hdl.core.config import CoreConfig
from hdl.bfp.stat import stat_layout
from hdl.core.core import REGS, stat_reg
from hdl.core.host import HostOp, HostStatus, host_cmd_layout, host_rsp_layout
from hdl.core.isa import PREC_ENTRY, STATUS_NAMES, stat_slot
from sim.model.stats import StatState
from hdl.optim.config import STATUS_FIELDS

__all__ = ["CoreDriver", "HostError", "pack_cmd", "unpack_rsp"]


class HostError(RuntimeError):
    """A host command was rejected (its :class:`~hdl.core.host.HostStatus` is in ``status``)."""

    def __init__(self, what: str, status: int):
        self.status = status
        names = {v: k for k, v in vars(HostStatus).items() if k.isupper()}
        super().__init__(f"{what}: {names.get(status, status)}")


def pack_cmd(config: CoreConfig, op: int, addr: int = 0, data: int = 0) -> int:
    return host_cmd_layout(config).const({"op": op, "addr": addr, "data": data}).as_value().value


def unpack_rsp(config: CoreConfig, word: int) -> tuple[int, int, int]:
    v = host_rsp_layout(config).from_bits(word)
    return v.op, v.status, v.data


def _line_word(words) -> int:
    out = 0
    for j, w in enumerate(np.asarray(words, np.uint32).reshape(-1)):
        out |= int(w) << (32 * j)
    return out


class CoreDriver:
    """Host actions over a transport.

    Parameters
    ----------
    config : CoreConfig
    transport : object with ``async transact(cmds, deadline) -> list[int]``
    run_deadline : int
        Cycle budget of one START (the program's whole run).
    """

    def __init__(self, config: CoreConfig, transport, *, run_deadline: int = 2_000_000):
        self.config, self.transport, self.run_deadline = config, transport, run_deadline

    async def _do(self, cmds, deadline=None):
        rsps = await self.transport.transact(cmds, deadline or (len(cmds) * 4 + 100))
        if len(rsps) != len(cmds):
            raise RuntimeError(f"{len(cmds)} commands got {len(rsps)} responses")
        return [unpack_rsp(self.config, r) for r in rsps]

    async def _checked(self, cmds, what):
        out = await self._do(cmds)
        for op, status, data in out:
            if status != HostStatus.OK:
                raise HostError(what, status)
        return out

    async def write_lines(self, line: int, words) -> None:
        words = np.asarray(words, np.uint32).reshape(-1, self.config.size)
        await self._checked([pack_cmd(self.config, HostOp.WRITE, line + i, _line_word(w))
                             for i, w in enumerate(words)], f"WRITE at line {line}")

    async def read_lines(self, line: int, n: int) -> np.ndarray:
        out = await self._checked([pack_cmd(self.config, HostOp.READ, line + i)
                                   for i in range(n)], f"READ at line {line}")
        S = self.config.size
        res = np.zeros((n, S), np.uint32)
        for i, (_, _, data) in enumerate(out):
            for j in range(S):
                res[i, j] = (data >> (32 * j)) & 0xFFFFFFFF
        return res

    async def load_program(self, words) -> None:
        await self._checked([pack_cmd(self.config, HostOp.PROG, i, int(w))
                             for i, w in enumerate(words)], "PROG")

    async def set_precision(self, layer, mode, width_a, width_b, rounding) -> None:
        entry = PREC_ENTRY.const({"width_a": width_a, "width_b": width_b,
                                  "rounding": rounding}).as_value().value
        await self._checked([pack_cmd(self.config, HostOp.PREC, layer * 4 + mode, entry)],
                            f"PREC layer {layer} mode {mode}")

    async def setreg(self, reg: int, bits: int) -> None:
        await self._checked([pack_cmd(self.config, HostOp.SETREG, reg, int(bits))],
                            f"SETREG {reg}")

    async def set_threshold(self, layer, mode, operand, value) -> None:
        await self._checked([pack_cmd(self.config, HostOp.THRESH,
                                      stat_slot(layer, mode, operand), int(value))],
                            f"THRESH layer {layer} mode {mode} operand {operand}")

    async def read_stats(self) -> dict:
        """Every FAST statistic: ``{(layer, mode, operand): StatState}`` (two REGs each)."""
        keys = [(layer, mode, op) for layer in range(self.config.layers) for mode in range(3)
                for op in (0, 1)]
        out = await self._checked([pack_cmd(self.config, HostOp.REG, stat_reg(stat_slot(*k), w))
                                   for k in keys for w in (0, 1)], "REG (statistics)")
        layout = stat_layout(self.config.array.bfp(0))
        res = {}
        for i, k in enumerate(keys):
            res[k] = StatState.of(layout.from_bits(out[2 * i][2] | out[2 * i + 1][2] << 64))
        return res

    async def run(self) -> tuple[int, int]:
        (op, status, data), = await self._do([pack_cmd(self.config, HostOp.START)],
                                             self.run_deadline)
        return status, data & 0xFFFF

    async def read_regs(self) -> dict:
        out = await self._checked([pack_cmd(self.config, HostOp.REG, i)
                                   for i in range(len(REGS))], "REG")
        return {name: data for (name, _), (_, _, data) in zip(REGS, out)}

    async def optim_status(self) -> dict:
        regs = await self.read_regs()
        return {name: regs[f"optim_{name}"] for name, _ in STATUS_FIELDS}

    async def apply(self, actions) -> dict:
        """Execute host actions (module docstring); returns the read results."""
        out = {}
        for act in actions:
            kind = act[0]
            if kind == "write":
                await self.write_lines(act[1], act[2])
            elif kind == "read":
                out[act[1]] = await self.read_lines(act[2], act[3])
            elif kind == "program":
                await self.load_program(act[1])
            elif kind == "prec":
                await self.set_precision(*act[1:])
            elif kind == "setreg":
                await self.setreg(act[1], act[2])
            elif kind == "thresh":
                await self.set_threshold(*act[1:])
            elif kind == "stats":
                out[act[1]] = await self.read_stats()
            elif kind == "run":
                out.setdefault("run", []).append(await self.run())
            elif kind == "status":
                out["status"] = await self.optim_status()
            elif kind == "counters":
                out["counters"] = await self.read_regs()
            else:
                raise ValueError(f"unknown host action {kind!r}")
        return out

    @staticmethod
    def status_name(status: int) -> str:
        return STATUS_NAMES.get(status, str(status))
