"""The shared FP32 scratchpad: banks of ``amaranth.lib.memory`` and a crossbar to the clients.

Every engine and the host reach memory through a :class:`~hdl.lib.memport.LinePort`; the
crossbar routes each access to the bank its line address decodes to
(``bank = addr // bank_depth``). A bank has one read port and one write port (a simple
dual-port block RAM). The sequencer's bank scoreboard gives a bank to one instruction at a
time and the ISA's check keeps two ports of one instruction off the same bank port, so two
clients never address one bank port in the same cycle; if they do anyway, the lower-numbered
client wins and the sticky ``conflict`` output rises (tests assert it stays low).
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..lib.bram import OutRegRAM
from ..lib.memport import LinePort
from ..lib.mustuse import used_if_rejected
from .config import CoreConfig

__all__ = ["Scratchpad"]


class Scratchpad(wiring.Component):
    """``config.banks`` banks of ``config.bank_depth`` lines of ``S`` FP32 words.

    Parameters
    ----------
    config : CoreConfig
    clients : int
        Number of client ports.
    registered : tuple of int
        Clients whose requests (read and write: enables, addresses, write data) pass a register
        before the crossbar: each of their accesses reaches its bank one cycle later, so their
        read latency is 2 (a write lands one edge later too; the order of one client's accesses
        is kept). A client's path to a bank then starts at that register, not in the client's
        logic. Default: none.
    out_registered : tuple of int
        Clients that read the banks' read data through a register (one per bank, after the
        block RAM, before the crossbar's read selects): each of their reads answers one cycle
        later (read latency 2, or 3 if ``registered`` too), and a block RAM's output ends at
        a flip-flop instead of crossing the chip into a client. Writes are unchanged.
        Default: none (then no such registers).

    Members
    -------
    ports : In(LinePort(addr_bits=config.line_bits, words=S)).array(clients)
        Client ports (the memory side of each), global line addresses. Read latency 1 cycle,
        one more for a ``registered`` client and one more for an ``out_registered`` one
        (:meth:`read_latency`): the bank's read data passes a mux selected by the bank
        registered with the read.
    conflict : Out(1)
        Sticky: two clients addressed the same bank port in one cycle (up from the second
        cycle after it).
    ram_banks : bool
        Each bank an :class:`~hdl.lib.bram.OutRegRAM` (the registered read data inside the
        block RAM on an ECP5; needs every client ``out_registered``). Default ``False``: a
        ``Memory`` and, for ``out_registered`` clients, a register of its read data.
    collision : Out(1)
        Sticky: a bank's read port and write port addressed one line in one cycle (up from
        the second cycle after it; any written word). The read returns the line as it was
        in the simulators and where yosys maps a ``Memory`` bank (its collision logic); in
        the written words of an ``OutRegRAM`` bank on an ECP5 it is undefined. The core
        reports it as a conflict when its banks are OutRegRAMs.
    """

    def __init__(self, *, config: CoreConfig, clients: int, registered: tuple = (),
                 out_registered: tuple = (), ram_banks: bool = False):
        with used_if_rejected(self):
            if not isinstance(config, CoreConfig):
                raise TypeError(f"Scratchpad.config must be a CoreConfig, not {config!r}")
            if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
                raise ValueError(f"Scratchpad.clients must be a positive int, not {clients!r}")
            for name, value in (("registered", registered),
                                ("out_registered", out_registered)):
                if not isinstance(value, tuple):
                    raise TypeError(f"Scratchpad.{name} must be a tuple of client indices, "
                                    f"not {value!r}")
                for i in value:
                    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < clients:
                        raise ValueError(f"Scratchpad.{name}: {i!r} is not a client index "
                                         f"(0 .. {clients - 1})")
            if not isinstance(ram_banks, bool):
                raise TypeError(f"Scratchpad.ram_banks must be a bool, not {ram_banks!r}")
            if ram_banks and len(set(out_registered)) != clients:
                raise ValueError("Scratchpad.ram_banks needs every client out_registered")
        self.config, self.clients = config, clients
        self.registered = tuple(sorted(set(registered)))
        self.out_registered = tuple(sorted(set(out_registered)))
        self.ram_banks = ram_banks
        super().__init__({
            "ports": In(LinePort(addr_bits=config.line_bits, words=config.size)).array(clients),
            "conflict": Out(1), "collision": Out(1),
        })
        #: the bank memories of the last elaboration (tests read them)
        self.memories = []

    def read_latency(self, client: int) -> int:
        """Cycles from a read on ``client``'s port to its data: 1, plus 1 if it is
        ``registered``, plus 1 if it is ``out_registered``."""
        return 1 + (client in self.registered) + (client in self.out_registered)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, nb, bb = cfg.size, cfg.banks, cfg.bank_bits
        self.memories = []
        rports, wports = [], []
        # ram_banks (every client reading through the banks' output registers): each bank is
        # an OutRegRAM (on an ECP5 the block RAMs' own output registers; docs/toolchain.md),
        # its r_data the registered read data; otherwise a Memory and, for out_registered
        # clients, a register of its read data below
        bank_regs = self.ram_banks
        for b in range(nb):
            if bank_regs:
                ram = OutRegRAM(words=S, depth=cfg.bank_depth)
                m.submodules[f"bank{b}"] = ram
                self.memories.append(ram.memory)
                rp = SimpleNamespace(addr=ram.r_addr, en=ram.r_en, data=ram.r_data)
                wp = SimpleNamespace(addr=ram.w_addr, en=ram.w_en, data=ram.w_data)
            else:
                mem = Memory(shape=S * 32, depth=cfg.bank_depth, init=[])
                m.submodules[f"bank{b}"] = mem
                self.memories.append(mem)
                rp, wp = mem.read_port(), mem.write_port(granularity=32)
            rports.append(rp)
            wports.append(wp)

        def bank_of(addr):
            return addr[bb:] if cfg.line_bits > bb else 0

        def hits_of(p):     # per bank: the client reads / writes it
            return (Cat(*[p.r_en & (bank_of(p.r_addr) == b) for b in range(nb)]),
                    Cat(*[(p.w_en != 0) & (bank_of(p.w_addr) == b) for b in range(nb)]))

        # each client's requests as the crossbar sees them: the port itself, or a register of
        # it (``registered``; its bank decode is registered beside it, so the crossbar's
        # selects start at registers); the read data goes back on the port
        reqs, req_hits = [], []
        for i, p in enumerate(self.ports):
            if i in self.registered:
                q = p.signature.create(path=(f"client{i}_req",))
                rh = Signal(nb, name=f"client{i}_req_r_banks")
                wh = Signal(nb, name=f"client{i}_req_w_banks")
                m.d.sync += [q.r_en.eq(p.r_en), q.r_addr.eq(p.r_addr), q.w_en.eq(p.w_en),
                             q.w_addr.eq(p.w_addr), q.w_data.eq(p.w_data),
                             Cat(rh, wh).eq(Cat(*hits_of(p)))]
                m.d.comb += p.r_data.eq(q.r_data)
                reqs.append(q)
                req_hits.append((rh, wh))
            else:
                reqs.append(p)
                req_hits.append(hits_of(p))

        conflicts, collisions = [], []
        for b in range(nb):
            rp, wp = rports[b], wports[b]
            m.d.comb += rp.en.eq(0)         # a read port's enable defaults to 1
            r_hits = [rh[b] for rh, _ in req_hits]
            w_hits = [wh[b] for _, wh in req_hits]
            # priority mux, client 0 highest: the last assignment wins in Amaranth, so walk
            # the clients from the lowest priority up (yosys maps this chain to a smaller and
            # shallower netlist than one-hot grants with an AND-OR: measured, S = 4, 12
            # clients, 13,560 against 13,653 LUT4 and 16.6 against 20.6 ns by boards.paths)
            for p, hit in reversed(list(zip(reqs, r_hits))):
                with m.If(hit):
                    m.d.comb += [rp.addr.eq(p.r_addr[:bb]), rp.en.eq(1)]
            for p, hit in reversed(list(zip(reqs, w_hits))):
                with m.If(hit):
                    m.d.comb += [wp.addr.eq(p.w_addr[:bb]), wp.data.eq(p.w_data),
                                 wp.en.eq(p.w_en)]
            for hits in (r_hits, w_hits):
                cnt = sum(h.as_unsigned() for h in hits) if len(hits) > 1 else 0
                if len(hits) > 1:
                    conflicts.append(cnt > 1)
            # a read and a write of one line of the bank in one cycle: the simulators read the
            # line as it was; a block RAM without yosys's collision logic (OutRegRAM on an
            # ECP5) gives undefined data: flagged in every build (`collision`)
            collisions.append(rp.en & (wp.en != 0) & (rp.addr == wp.addr))
        # out_registered: every bank's read data registered once, for those clients (the
        # OutRegRAM banks' r_data already are)
        rdata_q = []
        if bank_regs:
            rdata_q = [rp.data for rp in rports]
        elif self.out_registered:
            for b in range(nb):
                q = Signal(S * 32, name=f"bank{b}_rdata_q")
                m.d.sync += q.eq(rports[b].data)
                rdata_q.append(q)
        # read data: each client selects the bank registered with its last read (one cycle
        # later again for an out_registered client, with the registered data)
        for i, p in enumerate(reqs):
            sel = Signal(range(nb), name=f"rsel{i}")
            with m.If(p.r_en):
                m.d.sync += sel.eq(bank_of(p.r_addr))
            data = [rp.data for rp in rports]
            if i in self.out_registered:
                sel_q = Signal(range(nb), name=f"rsel{i}_q")
                m.d.sync += sel_q.eq(sel)
                sel, data = sel_q, rdata_q
            with m.Switch(sel):
                for b in range(nb):
                    with m.Case(b):
                        m.d.comb += p.r_data.eq(data[b])
        if conflicts:
            # registered before the OR: the clash check is off the path from a client's
            # enable to the bank ports (the flag rises one cycle after the clash)
            clash = Signal(len(conflicts), name="clash")
            m.d.sync += clash.eq(Cat(*conflicts))
            with m.If(clash.any()):
                m.d.sync += self.conflict.eq(1)
        collide = Signal(nb, name="collide")          # registered as the clash above
        m.d.sync += collide.eq(Cat(*collisions))
        with m.If(collide.any()):
            m.d.sync += self.collision.eq(1)
        return m
