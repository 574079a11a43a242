"""cocotb 2.x drivers and monitors for ``amaranth.lib.stream`` ports in generated Verilog.

A stream member ``i`` of a component appears in the Verilog as ``i__payload``, ``i__valid`` and
``i__ready``. Payloads are handled as integers, packed and unpacked with the layouts of
:mod:`hdl.formats` and the blocks' own layout functions.

Stream rules kept here: the driver never drops ``valid`` or changes ``payload`` while a
transfer is pending; transfers happen on a rising edge where ``valid`` and ``ready`` are both 1.
"""
from __future__ import annotations

import random
from collections import deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import (ClockCycles, Event, ReadOnly, RisingEdge, SimTimeoutError,
                             with_timeout)

__all__ = ["start_clock", "reset", "wait_trigger", "StreamDriver", "StreamMonitor", "StreamTB",
           "CLOCK_NS", "WAIT_CYCLES"]

#: Clock period of every cocotb testbench (:func:`start_clock`), in ns.
CLOCK_NS = 10
#: Default deadline of one wait, in clock cycles: far beyond any single wait of the cocotb
#: tier (the longest, a training step of the S = 8 core, is about 110k cycles).
WAIT_CYCLES = 1_000_000


def start_clock(dut, period_ns: int = CLOCK_NS):
    return cocotb.start_soon(Clock(dut.clk, period_ns, unit="ns").start())


async def wait_trigger(trigger, what: str, max_cycles: int = WAIT_CYCLES):
    """Await ``trigger`` (e.g. ``FallingEdge(dut.busy)``) without waking Python every cycle;
    :class:`TimeoutError` naming ``what`` if it has not fired within ``max_cycles`` clock
    cycles of :data:`CLOCK_NS`."""
    try:
        return await with_timeout(trigger, max_cycles * CLOCK_NS, "ns")
    except SimTimeoutError:
        raise TimeoutError(f"{what}: not within {max_cycles} cycles (deadline)") from None


async def reset(dut, cycles: int = 2):
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0


class StreamDriver:
    """Sends payloads on a stream, with random idle cycles between them.

    Parameters
    ----------
    dut, name : the DUT handle and stream member name (``"i"``).
    idle_prob : probability of an idle (``valid = 0``) cycle before each payload.
    rng : :class:`random.Random` (fixed seed for reproducibility).
    timeout_cycles : deadline of one transfer (:class:`TimeoutError` after it).
    """

    def __init__(self, dut, name: str, *, idle_prob: float = 0.0, rng: random.Random | None = None,
                 timeout_cycles: int = WAIT_CYCLES):
        self.clk = dut.clk
        self.name = name
        self.timeout_cycles = timeout_cycles
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.idle_prob = idle_prob
        self.rng = rng or random.Random(0)
        self.valid.value = 0
        self.sent = 0

    async def send(self, payload: int) -> None:
        while self.idle_prob and self.rng.random() < self.idle_prob:
            self.valid.value = 0
            await RisingEdge(self.clk)
        self.valid.value = 1
        self.payload.value = payload
        for _ in range(self.timeout_cycles):
            await ReadOnly()
            accepted = bool(self.ready.value)
            await RisingEdge(self.clk)
            if accepted:
                break
        else:
            raise TimeoutError(f"{self.name}: payload {payload:#x} not accepted within "
                               f"{self.timeout_cycles} cycles (deadline)")
        self.valid.value = 0
        self.sent += 1

    async def send_all(self, payloads) -> None:
        for p in payloads:
            await self.send(p)


class StreamMonitor:
    """Receives payloads from a stream, with random backpressure (``ready = 0`` cycles).

    Received payloads go to :attr:`queue` (integers), in order.
    """

    def __init__(self, dut, name: str, *, stall_prob: float = 0.0,
                 rng: random.Random | None = None):
        self.clk = dut.clk
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.stall_prob = stall_prob
        self.rng = rng or random.Random(1)
        self.queue: deque[int] = deque()
        self.ready.value = 0
        self._task = None
        #: the pending :meth:`wait_for`: (payload count, :class:`Event` set on reaching it)
        self._waiter: tuple[int, Event] | None = None

    def start(self):
        self._task = cocotb.start_soon(self._run())
        return self

    def stop(self):
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.ready.value = 0

    async def _run(self):
        while True:
            self.ready.value = int(not (self.stall_prob and self.rng.random() < self.stall_prob))
            await ReadOnly()
            if self.valid.value == 1 and self.ready.value == 1:
                self.queue.append(self.payload.value.to_unsigned())
                if self._waiter is not None and len(self.queue) >= self._waiter[0]:
                    self._waiter[1].set()
            await RisingEdge(self.clk)

    async def wait_for(self, count: int, timeout_cycles: int = WAIT_CYCLES) -> list[int]:
        """Wait until ``count`` payloads arrived; return and remove them.

        Returns at once if they are already queued, otherwise on the rising edge after the
        last one's transfer (as a loop polling the queue every cycle would, without waking
        Python every cycle: a training step's response comes after thousands of cycles).
        :class:`TimeoutError` after ``timeout_cycles`` cycles of :data:`CLOCK_NS`."""
        if len(self.queue) < count:
            assert self._waiter is None, "one wait_for at a time on a monitor"
            self._waiter = (count, Event())
            try:
                await with_timeout(self._waiter[1].wait(), timeout_cycles * CLOCK_NS, "ns")
            except SimTimeoutError:
                raise TimeoutError(f"got {len(self.queue)} of {count} payloads in "
                                   f"{timeout_cycles} cycles") from None
            finally:
                self._waiter = None
            # the event fires in the ReadOnly phase of the transfer's cycle; return, as
            # before, on the next rising edge, where the caller may drive the DUT again
            await RisingEdge(self.clk)
        return [self.queue.popleft() for _ in range(count)]


class StreamTB:
    """Base of the one-stream-in, one-stream-out testbenches (``i`` -> ``o``).

    Holds the driver (random idle cycles, ``idle_prob``) and the monitor (random backpressure,
    ``stall_prob``), seeded from ``seed + 1`` and ``seed + 2``, and after :meth:`start` a watcher
    that records the cycle of every ``i`` and ``o`` transfer in ``accepts`` / ``outputs``
    (``cycle`` counts rising edges since :meth:`start`). Subclasses add the golden model, the
    expected queue and the scoreboard.
    """

    def __init__(self, dut, *, seed: int, idle_prob: float = 0.0, stall_prob: float = 0.0):
        self.dut = dut
        self.seed = seed
        self.idle_prob, self.stall_prob = idle_prob, stall_prob
        self.cycle = 0
        self.accepts: list[int] = []      # cycle of every i transfer
        self.outputs: list[int] = []      # cycle of every o transfer
        self.make_ports()

    def make_ports(self) -> None:
        """(Re)create the driver and the monitor, e.g. after a reset in mid-stream."""
        self.driver = StreamDriver(self.dut, "i", idle_prob=self.idle_prob,
                                   rng=random.Random(self.seed + 1))
        self.monitor = StreamMonitor(self.dut, "o", stall_prob=self.stall_prob,
                                     rng=random.Random(self.seed + 2))

    async def start(self) -> None:
        """Clock, reset, then start the monitor and the transfer watcher."""
        start_clock(self.dut)
        await reset(self.dut)
        self.monitor.start()
        self.watch_task = cocotb.start_soon(self._watch())

    async def _watch(self) -> None:
        d = self.dut
        while True:
            await ReadOnly()
            if d.i__valid.value == 1 and d.i__ready.value == 1:
                self.accepts.append(self.cycle)
            if d.o__valid.value == 1 and d.o__ready.value == 1:
                self.outputs.append(self.cycle)
            await RisingEdge(d.clk)
            self.cycle += 1
