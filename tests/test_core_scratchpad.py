"""The banked scratchpad and its crossbar (hdl/core/scratchpad.py): every client reaches every
bank with one-cycle reads and per-word writes; clients in different banks work in the same
cycle; read data holds while a client does not read; a same-cycle clash raises `conflict`."""
import random

import numpy as np
import pytest

from amaranth.sim import Simulator

from hdl.core.config import CoreConfig
from hdl.core.scratchpad import Scratchpad
from sim.tb.amaranth_tb import add_deadline

CFG = CoreConfig(size=2, banks=4, bank_depth=16, prog_depth=16)


def _line(words):
    return sum(int(w) << (32 * j) for j, w in enumerate(words))



def _drive(ctx, port, rng, bank, active=True):
    """Random request of ``port`` in ``bank`` this cycle (none if not ``active``): a read with
    probability 0.6, a write of random words under random enables with probability 0.5.
    Returns ``(read address, read enable, write address, write enables, words)``."""
    ra = bank * CFG.bank_depth + rng.randrange(CFG.bank_depth)
    wa = bank * CFG.bank_depth + rng.randrange(CFG.bank_depth)
    ren = active and rng.random() < 0.6
    wen = rng.randrange(1 << CFG.size) if active and rng.random() < 0.5 else 0
    wd = [rng.getrandbits(32) for _ in range(CFG.size)]
    ctx.set(port.r_addr, ra)
    ctx.set(port.r_en, ren)
    ctx.set(port.w_addr, wa)
    ctx.set(port.w_en, wen)
    ctx.set(port.w_data, _line(wd))
    return ra, ren, wa, wen, wd


def _simulate(dut, tb):
    """Run testbench ``tb`` on ``dut`` with a clock and the suite's cycle deadline."""
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    add_deadline(sim)
    sim.run()

def test_random_traffic_in_disjoint_banks_matches_a_memory_model():
    rng = random.Random(5)
    clients = 3
    dut = Scratchpad(config=CFG, clients=clients)
    model = np.zeros((CFG.lines, CFG.size), np.uint64)
    errors = []

    async def tb(ctx):
        pending = [None] * clients         # expected read data next cycle
        for cycle in range(600):
            banks = rng.sample(range(CFG.banks), clients)   # disjoint banks this cycle
            plan = []
            for i, p in enumerate(dut.ports):
                plan.append(_drive(ctx, p, rng, banks[i]))
            await ctx.tick()
            # reads see the memory before this cycle's writes (not transparent)
            for i, (ra, ren, wa, wen, wd) in enumerate(plan):
                # a held value survives until another client reads the same bank; check the
                # fresh reads, and holds while nobody else used that bank
                if ren:
                    pending[i] = (_line(model[ra]), ra // CFG.bank_depth)
                elif pending[i] is not None and any(
                        q[1] and q[0] // CFG.bank_depth == pending[i][1]
                        for k, q in enumerate(plan) if k != i):
                    pending[i] = None
            for i, (ra, ren, wa, wen, wd) in enumerate(plan):
                for j in range(CFG.size):
                    if (wen >> j) & 1:
                        model[wa, j] = wd[j]
            for i, p in enumerate(dut.ports):
                if pending[i] is not None and ctx.get(p.r_data) != pending[i][0]:
                    errors.append((cycle, i))
        assert ctx.get(dut.conflict) == 0

    _simulate(dut, tb)
    assert errors == []


def test_registered_clients_read_later():
    """``Scratchpad(registered=..., out_registered=...)``: random reads and writes of four
    clients in a new bank each cycle: client 0 plain, client 1's requests through the
    register stage, client 2's read data through the banks' registers, client 3 both (the
    FPGA build's engines: read latency 3); the banks are drawn so that the accesses reaching
    the banks at an edge are in four different banks. Against a memory model in which a
    registered client's accesses happen one edge after they are made and an out_registered
    client's read data shows one cycle after the edge that read it: read data 1, 2, 2 and 3
    cycles after ``r_en`` (``read_latency``), held while the client does not read and no other
    client reads that bank, every write where the model puts it, ``conflict`` low. A read
    select that did not wait for the registered data shows the next read's bank."""
    rng = random.Random(7)
    clients = 4
    dut = Scratchpad(config=CFG, clients=clients, registered=(1, 3), out_registered=(2, 3))
    assert [dut.read_latency(i) for i in range(clients)] == [1, 2, 2, 3]
    late = [int(i in dut.registered) for i in range(clients)]
    out = [int(i in dut.out_registered) for i in range(clients)]
    model = np.zeros((CFG.lines, CFG.size), np.uint64)
    errors, checked = [], [0] * clients

    async def tb(ctx):
        plans = []                          # every cycle's requests, per client
        shown = [[] for _ in range(clients)]    # (first cycle shown, line, bank, edge read)
        bank_reads = [[] for _ in range(CFG.banks)]     # (edge, client) of every read
        prev13 = [0, 1]
        for cycle in range(800):
            # clients 0 and 2 reach the banks at this edge, 1 and 3 (their requests of the
            # cycle before) too: 0 and 2 get the two banks 1 and 3 left
            free = [b for b in range(CFG.banks) if b not in prev13]
            rng.shuffle(free)
            now13 = rng.sample(range(CFG.banks), 2)
            banks = [free[0], now13[0], free[1], now13[1]]
            prev13 = now13
            plans.append([_drive(ctx, p, rng, banks[i]) for i, p in enumerate(dut.ports)])
            await ctx.tick()
            # the accesses performed at this edge; reads see the memory before its writes
            at_edge = [plans[cycle - late[i]][i] if cycle >= late[i] else None
                       for i in range(clients)]
            for i, req in enumerate(at_edge):
                if req is not None and req[1]:
                    b = req[0] // CFG.bank_depth
                    bank_reads[b].append((cycle, i))
                    shown[i] = shown[i][-1:] + [(cycle + out[i], _line(model[req[0]]), b,
                                                 cycle)]
            for req in at_edge:
                if req is None:
                    continue
                _ra, _ren, wa, wen, wd = req
                for j in range(CFG.size):
                    if (wen >> j) & 1:
                        model[wa, j] = wd[j]
            for i, p in enumerate(dut.ports):
                due = [r for r in shown[i] if r[0] <= cycle]   # (the last may show later)
                if not due:
                    continue
                first, value, b, edge = due[-1]
                # held: no other client read the bank after it (up to what shows now)
                if any(e > edge and e <= cycle - out[i] and j != i
                       for e, j in bank_reads[b]):
                    continue
                checked[i] += 1
                if ctx.get(p.r_data) != value:
                    errors.append((cycle, i))
        assert ctx.get(dut.conflict) == 0

    _simulate(dut, tb)
    assert errors == [] and min(checked) > 200, (errors[:5], checked)


@pytest.mark.parametrize("name", ["registered", "out_registered"])
@pytest.mark.parametrize("value, exc", [((3,), ValueError), ((-1,), ValueError),
                                        ((True,), ValueError), ([1], TypeError)])
def test_registered_must_name_clients(name, value, exc):
    with pytest.raises(exc, match=f"Scratchpad.{name}"):
        Scratchpad(config=CFG, clients=3, **{name: value})


def test_same_bank_clash_sets_conflict():
    dut = Scratchpad(config=CFG, clients=2)

    async def tb(ctx):
        for p in dut.ports:
            ctx.set(p.r_addr, 3)
            ctx.set(p.r_en, 1)
        await ctx.tick()
        assert ctx.get(dut.conflict) == 0        # the clash is registered first
        for p in dut.ports:
            ctx.set(p.r_en, 0)
        await ctx.tick()
        assert ctx.get(dut.conflict) == 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    add_deadline(sim)
    sim.run()


def test_clashes_follow_the_cycle_exact_model():
    """Random traffic with same-bank clashes against a cycle-exact model: on a clash the
    lowest-numbered client wins the bank port (a loser's read returns the winner's line), a
    bank's read data holds while nobody reads it, each client's r_data follows the bank of its
    last read (held while r_en = 0), and `conflict` rises one cycle after the first clash's
    and stays up; `collision` likewise after the first cycle in which a bank's winning read
    and winning write address one line (the read returns the line as it was)."""
    rng = random.Random(11)
    clients, nb, depth, S = 5, CFG.banks, CFG.bank_depth, CFG.size
    dut = Scratchpad(config=CFG, clients=clients)
    mem = np.zeros((CFG.lines, S), np.uint64)
    bank_out = [0] * nb                 # each bank's registered read data
    sel = [0] * clients                 # each client's bank of its last read
    errors = []

    async def tb(ctx):
        conflict = seen = 0            # the flag, and the clashes registered so far
        collision = met = 0            # the same for same-line reads and writes
        for cycle in range(800):
            plan = []
            for p in dut.ports:
                # few banks and few lines: clashes and same-address reads/writes are common
                ra = rng.randrange(nb) * depth + rng.randrange(3)
                wa = rng.randrange(nb) * depth + rng.randrange(3)
                ren = rng.random() < 0.4
                wen = rng.randrange(1 << S) if rng.random() < 0.4 else 0
                wd = [rng.getrandbits(32) for _ in range(S)]
                for sig, v in ((p.r_addr, ra), (p.r_en, ren), (p.w_addr, wa), (p.w_en, wen),
                               (p.w_data, _line(wd))):
                    ctx.set(sig, v)
                plan.append((ra, ren, wa, wen, wd))
            await ctx.tick()
            clash = same_line = False
            for b in range(nb):
                readers = [q for q in plan if q[1] and q[0] // depth == b]
                writers = [q for q in plan if q[3] and q[2] // depth == b]
                clash |= len(readers) > 1 or len(writers) > 1
                same_line |= bool(readers and writers) and readers[0][0] == writers[0][2]
                if readers:                 # the first (lowest) reader wins; old contents
                    bank_out[b] = _line(mem[readers[0][0]])
                if writers:
                    wa, wen, wd = writers[0][2:]
                    for j in range(S):
                        if (wen >> j) & 1:
                            mem[wa, j] = wd[j]
            conflict, seen = seen, seen | clash
            collision, met = met, met | same_line
            for i, (ra, ren, *_rest) in enumerate(plan):
                if ren:
                    sel[i] = ra // depth
                if ctx.get(dut.ports[i].r_data) != bank_out[sel[i]]:
                    errors.append((cycle, i))
            if ctx.get(dut.conflict) != conflict:
                errors.append((cycle, "conflict"))
            if ctx.get(dut.collision) != collision:
                errors.append((cycle, "collision"))
        assert seen and conflict and met and collision

    _simulate(dut, tb)
    assert errors == []


@pytest.mark.parametrize("select", [False, True], ids=["by_enable", "by_select"])
def test_shared_line_port_takes_turns_and_flags_a_clash(select):
    """:class:`hdl.lib.memport.SharedLinePort` (the core's host port and the optimizer's first
    port on one client) in front of a scratchpad, beside a second client: random traffic where
    the two sharers take turns in runs of cycles (as the host between programs and the
    optimizer during one) matches a memory model word for word, reads of both sharers come
    back on their own ``r_data``, and ``clash`` stays low; then a read by both in one cycle
    sets ``clash`` (from the next cycle on), the first sharer's request being the one made.
    With ``select`` the turn is also given on ``r_sel`` / ``w_sel`` (as the core does from
    registers), and a write or read by the sharer not selected reaches no memory and sets
    ``clash``."""
    from amaranth.hdl import Module
    from amaranth.lib.wiring import connect

    from hdl.lib.memport import SharedLinePort
    rng = random.Random(11)
    top = Module()
    spad = top.submodules.spad = Scratchpad(config=CFG, clients=2)
    share = top.submodules.share = SharedLinePort(addr_bits=CFG.line_bits, words=CFG.size,
                                                  select=select)
    connect(top, share.line, spad.ports[0])
    users = [share.first, share.second, spad.ports[1]]      # the two sharers, another client
    model = np.zeros((CFG.lines, CFG.size), np.uint64)
    errors, reads = [], [0, 0, 0]

    async def tb(ctx):
        turn, pending = 0, [None] * 3
        for cycle in range(800):
            if rng.random() < 0.05:
                turn ^= 1                                   # the other sharer's run begins
            if select:
                ctx.set(share.r_sel, turn)
                ctx.set(share.w_sel, turn)
            banks = rng.sample(range(CFG.banks), 2)         # the client and the other: apart
            plan = []
            for i, p in enumerate(users):
                plan.append(_drive(ctx, p, rng, banks[1] if i == 2 else banks[0],
                                   active=(i == 2) or (i == turn)))
            await ctx.tick()
            for i, (ra, ren, wa, wen, wd) in enumerate(plan):
                pending[i] = _line(model[ra]) if ren else None
                reads[i] += bool(ren)
            for ra, ren, wa, wen, wd in plan:
                for j in range(CFG.size):
                    if (wen >> j) & 1:
                        model[wa, j] = wd[j]
            for i, p in enumerate(users):
                if pending[i] is not None and ctx.get(p.r_data) != pending[i]:
                    errors.append((cycle, i))
        assert ctx.get(share.clash) == 0 and ctx.get(spad.conflict) == 0
        if select:
            # the sharer not selected writes: nothing changes in memory, clash rises
            ctx.set(share.r_sel, 0)
            ctx.set(share.w_sel, 0)
            for p in (share.first, spad.ports[1]):
                ctx.set(p.r_en, 0)
                ctx.set(p.w_en, 0)
            ctx.set(share.second.r_en, 0)
            ctx.set(share.second.w_addr, 5)
            ctx.set(share.second.w_en, (1 << CFG.size) - 1)
            ctx.set(share.second.w_data, (1 << 32 * CFG.size) - 1)
            await ctx.tick()
            assert ctx.get(share.clash) == 1
            ctx.set(share.second.w_en, 0)
            ctx.set(share.first.r_addr, 5)
            ctx.set(share.first.r_en, 1)
            await ctx.tick()
            ctx.set(share.first.r_en, 0)
            assert ctx.get(share.first.r_data) == _line(model[5])
        # both sharers read in one cycle: the first's address is the one read, clash rises
        model_line = _line(model[5])
        for p, addr in ((share.first, 5), (share.second, 9)):
            ctx.set(p.r_addr, addr)
            ctx.set(p.r_en, 1)
            ctx.set(p.w_en, 0)
        ctx.set(spad.ports[1].r_en, 0)
        ctx.set(spad.ports[1].w_en, 0)
        await ctx.tick()
        assert ctx.get(share.clash) == 1
        assert ctx.get(share.second.r_data) == model_line

    _simulate(top, tb)
    assert errors == []
    assert min(reads) > 100


def test_ram_banks_read_as_memory_banks():
    """``ram_banks=True`` (each bank an :class:`hdl.lib.bram.OutRegRAM`, the FPGA build's)
    beside the same scratchpad with ``Memory`` banks and their read registers, fed the same
    random traffic (three out_registered clients, one of them registered too, same-bank
    clashes and same-line reads and writes included): every client's read data, ``conflict``
    and ``collision`` equal in every cycle."""
    from amaranth.hdl import Module
    rng = random.Random(23)
    clients, nb, depth, S = 3, CFG.banks, CFG.bank_depth, CFG.size
    kw = dict(config=CFG, clients=clients, registered=(1,), out_registered=(0, 1, 2))
    top = Module()
    ram = top.submodules.ram = Scratchpad(**kw, ram_banks=True)
    mem = top.submodules.mem = Scratchpad(**kw)
    errors, seen = [], {"collision": 0}

    async def tb(ctx):
        for cycle in range(600):
            for i in range(clients):
                ra = rng.randrange(nb) * depth + rng.randrange(3)
                wa = rng.randrange(nb) * depth + rng.randrange(3)
                req = {"r_addr": ra, "r_en": rng.random() < 0.5, "w_addr": wa,
                       "w_en": rng.randrange(1 << S) if rng.random() < 0.4 else 0,
                       "w_data": _line([rng.getrandbits(32) for _ in range(S)])}
                for dut in (ram, mem):
                    for name, v in req.items():
                        ctx.set(getattr(dut.ports[i], name), v)
            await ctx.tick()
            for i in range(clients):
                if ctx.get(ram.ports[i].r_data) != ctx.get(mem.ports[i].r_data):
                    errors.append((cycle, i))
            for flag in ("conflict", "collision"):
                if ctx.get(getattr(ram, flag)) != ctx.get(getattr(mem, flag)):
                    errors.append((cycle, flag))
            seen["collision"] |= ctx.get(ram.collision)

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    add_deadline(sim)
    sim.run()
    assert errors == [] and seen["collision"]


@pytest.mark.parametrize("kwargs, exc", [({"ram_banks": 1}, TypeError),
                                         ({"ram_banks": True}, ValueError),
                                         ({"ram_banks": True, "out_registered": (0,)},
                                          ValueError)])
def test_ram_banks_is_checked(kwargs, exc):
    with pytest.raises(exc, match="Scratchpad.ram_banks"):
        Scratchpad(config=CFG, clients=2, **kwargs)
