"""The shared FP32 scratchpad: banks of ``amaranth.lib.memory`` and a crossbar to the clients.

Every engine and the host reach memory through a :class:`~hdl.lib.memport.LinePort`; the
crossbar routes each access to the bank its line address decodes to
(``bank = addr // bank_depth``). A bank has one read port and one write port (a simple
dual-port block RAM). The sequencer's bank scoreboard gives a bank to one instruction at a
time and the ISA's check keeps two ports of one instruction off the same bank port, so two
clients never address one bank port in the same cycle; if they do anyway, the lower-numbered
client wins and the sticky ``conflict`` output rises (tests assert it stays low).

Each bank port's winner is priority-encoded to a client index that selects the address and
data through a binary mux tree, and each client's read data is a mux tree on its registered
bank number: on the ECP5 these map onto LUT4s plus the slices' free wide-function muxes, a
third fewer logic cells than priority if-chains and a ``Switch`` (docs/core.md "FPGA").
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..lib.memport import LinePort
from .config import CoreConfig

__all__ = ["Scratchpad"]


def _mux_tree(idx, items):
    """``items[idx]`` as a tree of 2:1 muxes on the bits of ``idx`` (an index past the end
    selects an item of the last subtree: the callers never use it)."""
    if len(items) == 1:
        return items[0]
    half = 1 << ((len(items) - 1).bit_length() - 1)
    return Mux(idx[half.bit_length() - 1], _mux_tree(idx, items[half:]),
               _mux_tree(idx, items[:half]))


class Scratchpad(wiring.Component):
    """``config.banks`` banks of ``config.bank_depth`` lines of ``S`` FP32 words.

    Parameters
    ----------
    config : CoreConfig
    clients : int
        Number of client ports.

    Members
    -------
    ports : In(LinePort(addr_bits=config.line_bits, words=S)).array(clients)
        Client ports (the memory side of each), global line addresses. Read latency 1 cycle:
        the bank's registered read data passes a mux selected by the bank registered with the
        read.
    conflict : Out(1)
        Sticky: two clients addressed the same bank port in one cycle.
    """

    def __init__(self, *, config: CoreConfig, clients: int):
        if not isinstance(config, CoreConfig):
            raise TypeError(f"Scratchpad.config must be a CoreConfig, not {config!r}")
        if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
            raise ValueError(f"Scratchpad.clients must be a positive int, not {clients!r}")
        self.config, self.clients = config, clients
        super().__init__({
            "ports": In(LinePort(addr_bits=config.line_bits, words=config.size)).array(clients),
            "conflict": Out(1),
        })
        #: the bank memories of the last elaboration (tests read them)
        self.memories = []

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, nb, bb = cfg.size, cfg.banks, cfg.bank_bits
        self.memories = []
        rports, wports = [], []
        for b in range(nb):
            mem = Memory(shape=S * 32, depth=cfg.bank_depth, init=[])
            m.submodules[f"bank{b}"] = mem
            self.memories.append(mem)
            rports.append(mem.read_port())
            wports.append(mem.write_port(granularity=32))

        def bank_of(addr):
            return addr[bb:] if cfg.line_bits > bb else 0

        def first_hit(hits, name):
            """Index of the lowest-numbered hit (don't care if none) and "two or more hit"."""
            idx = Signal(range(len(hits)), name=name)
            for i in reversed(range(len(hits))):
                with m.If(hits[i]):
                    m.d.comb += idx.eq(i)
            seen, clash = Const(0, 1), Const(0, 1)
            for h in hits:
                clash, seen = clash | (h & seen), seen | h
            return idx, seen, clash

        conflicts = []
        for b in range(nb):
            rp, wp = rports[b], wports[b]
            r_hits = [p.r_en & (bank_of(p.r_addr) == b) for p in self.ports]
            w_hits = [(p.w_en != 0) & (bank_of(p.w_addr) == b) for p in self.ports]
            # the lowest-numbered client that hits the port wins: its index drives a binary mux
            # tree (2:1 muxes map onto the ECP5's LUT4s and free PFU muxes; a priority if-chain
            # costs about one LUT4 per client per bit)
            r_idx, r_any, r_clash = first_hit(r_hits, f"rwin{b}")
            w_idx, w_any, w_clash = first_hit(w_hits, f"wwin{b}")
            m.d.comb += [
                rp.en.eq(r_any),
                rp.addr.eq(_mux_tree(r_idx, [p.r_addr[:bb] for p in self.ports])),
                wp.addr.eq(_mux_tree(w_idx, [p.w_addr[:bb] for p in self.ports])),
                wp.data.eq(_mux_tree(w_idx, [p.w_data for p in self.ports])),
                wp.en.eq(Mux(w_any, _mux_tree(w_idx, [p.w_en for p in self.ports]), 0)),
            ]
            if len(self.ports) > 1:
                conflicts += [r_clash, w_clash]
        # read data: each client selects the bank registered with its last read
        for i, p in enumerate(self.ports):
            sel = Signal(range(nb), name=f"rsel{i}")
            with m.If(p.r_en):
                m.d.sync += sel.eq(bank_of(p.r_addr))
            m.d.comb += p.r_data.eq(_mux_tree(sel, [rp.data for rp in rports]))
        if conflicts:
            with m.If(Cat(*conflicts).any()):
                m.d.sync += self.conflict.eq(1)
        return m
