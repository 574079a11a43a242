"""The Verilated training core in-process: a ctypes handle on ``libtessera_core.so``
(:mod:`sim.verilated.build`), whose C++ loop runs whole command batches, so Python acts only
between them (load a batch, START and wait for ``done``, read losses and counters).

:class:`VerilatedCore` is a transport for :class:`sim.host.driver.CoreDriver` (its
``transact`` is a coroutine that never suspends), and :func:`run_sync` runs the driver's
coroutines without an event loop::

    core = VerilatedCore(CoreConfig.preset("default"))
    drv = CoreDriver(core.config, core)
    out = run_sync(drv.apply(actions))
"""
from __future__ import annotations

import ctypes
import struct
from pathlib import Path

import numpy as np

from hdl.core.config import CoreConfig
from sim.verilated.build import CXX_OPT, build_core

__all__ = ["VerilatedCore", "run_sync", "Recorder"]

MAGIC = 0x54455353


def run_sync(coro):
    """Run a coroutine that never suspends (the driver over :class:`VerilatedCore`)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the coroutine suspended: its transport is not synchronous")


class Recorder:
    """Records every command batch sent (payload words and deadline) to replay it in the bare
    C++ loop (``tessera_core_bare FILE``): see :meth:`save`."""

    def __init__(self):
        self.batches: list[tuple[int, np.ndarray, int]] = []   # (commands, words, deadline)

    def save(self, path: Path) -> None:
        with open(path, "wb") as f:
            f.write(struct.pack("<QQ", MAGIC, len(self.batches)))
            for n, words, deadline in self.batches:
                f.write(struct.pack("<QQ", n, deadline))
                f.write(np.ascontiguousarray(words, "<u4").tobytes())


class VerilatedCore:
    """The training core's generated Verilog, Verilated, with its host port driven from C++.

    Parameters
    ----------
    config : CoreConfig
        Must be a preset's config (``tiny`` or ``default``): the Verilog is generated from the
        preset.
    build_log : callable
        Progress messages of the (cached) build.
    cxx_opt : str
        The C++ optimisation of the build (:func:`sim.verilated.build.build_core`): ``-O2``
        by default; the test suite uses ``-O1``.
    """

    def __init__(self, config: CoreConfig, *, build_log=print, cxx_opt: str = CXX_OPT):
        if not isinstance(config, CoreConfig):
            raise TypeError(f"config must be a CoreConfig, not {type(config).__name__}")
        preset = next((p for p in ("tiny", "default") if CoreConfig.preset(p) == config), None)
        if preset is None:
            raise ValueError("config must equal CoreConfig.preset('tiny') or "
                             "CoreConfig.preset('default') (the Verilog is built per preset)")
        self.config, self.preset = config, preset
        self.build_dir = build_core(preset, log=build_log, cxx_opt=cxx_opt)
        lib = ctypes.CDLL(str(self.build_dir / "libtessera_core.so"))
        lib.tess_new.restype = ctypes.c_void_p
        lib.tess_free.argtypes = [ctypes.c_void_p]
        lib.tess_cycles.argtypes = [ctypes.c_void_p]
        lib.tess_cycles.restype = ctypes.c_uint64
        lib.tess_reset.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.tess_idle.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        u32p = np.ctypeslib.ndpointer(np.uint32, flags="C_CONTIGUOUS")
        lib.tess_transact.argtypes = [ctypes.c_void_p, u32p, ctypes.c_int64, u32p,
                                      ctypes.c_uint64]
        lib.tess_transact.restype = ctypes.c_int64
        self._lib = lib
        self.cmd_words, self.rsp_words = lib.tess_cmd_words(), lib.tess_rsp_words()
        self._h = ctypes.c_void_p(lib.tess_new())
        self.recorder: Recorder | None = None
        self.reset()

    # -- C++ calls --------------------------------------------------------------------------
    @property
    def cycles(self) -> int:
        """Clock cycles simulated since the model was created."""
        return int(self._lib.tess_cycles(self._h))

    def reset(self, cycles: int = 4) -> None:
        """Synchronous reset held for ``cycles`` cycles (the scratchpad keeps its contents,
        as the hardware's block RAM does)."""
        self._lib.tess_reset(self._h, int(cycles))

    def idle(self, cycles: int) -> None:
        self._lib.tess_idle(self._h, int(cycles))

    def transact_sync(self, cmds, deadline: int) -> list[int]:
        """Send command payloads (ints) and return the response payloads (ints), all inside
        the C++ loop; :class:`TimeoutError` if ``deadline`` cycles pass first."""
        n = len(cmds)
        cw, rw = self.cmd_words, self.rsp_words
        buf = bytearray(n * cw * 4)
        nbytes = cw * 4
        for i, c in enumerate(cmds):
            buf[i * nbytes:(i + 1) * nbytes] = int(c).to_bytes(nbytes, "little")
        words = np.frombuffer(bytes(buf), "<u4").astype(np.uint32)
        if self.recorder is not None:
            self.recorder.batches.append((n, words.copy(), int(deadline)))
        rsps = np.zeros(n * rw, np.uint32)
        got = self._lib.tess_transact(self._h, words, n, rsps, int(deadline))
        if got != n:
            raise TimeoutError(f"{n} host commands: {got} responses within {deadline} cycles")
        raw = rsps.astype("<u4").tobytes()
        rb = rw * 4
        return [int.from_bytes(raw[i * rb:(i + 1) * rb], "little") for i in range(n)]

    async def transact(self, cmds, deadline):
        return self.transact_sync(cmds, deadline)

    def close(self) -> None:
        if self._h is not None:
            self._lib.tess_free(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
