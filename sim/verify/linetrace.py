"""pytest plugin: which lines of ``hdl/`` each test executes (``-p sim.verify.linetrace``).

The mutation runner (:mod:`sim.verify.mutation`) uses it once to map every mutation site to
the tests that execute it: a mutant runs only those tests. Lines executed while a test file is
imported or collected are charged to every test of that file; lines of a test's setup,
call and teardown to that test. Simulation itself is not traced (``Simulator.run``/``run_until``/``advance`` suspend it):
the design is elaborated before it runs. The map is written as JSON to ``$TESSERA_LINETRACE_OUT``:
``{"tests": {nodeid: {"outcome": str, "seconds": float, "lines": {path: [line, ...]}}}}``.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
_HDL = str(_ROOT / "hdl") + os.sep

_current: dict[str, set[int]] = {}
_collect: dict[str, dict[str, set[int]]] = {}   # test file -> lines run at its import
_tests: dict[str, dict] = {}
_is_hdl: dict[object, str | None] = {}


def _local(frame, event, arg):
    if event == "line":
        _current.setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
    return _local


def _global(frame, event, arg):
    code = frame.f_code
    hit = _is_hdl.get(code)
    if hit is None:
        hit = code.co_filename.startswith(_HDL)
        _is_hdl[code] = hit
    if hit:
        _current.setdefault(code.co_filename, set()).add(frame.f_lineno)
        return _local
    return None


def _take() -> dict[str, set[int]]:
    global _current
    out, _current = _current, {}
    return out


def _merge(a: dict[str, set[int]], b: dict[str, set[int]]) -> None:
    for k, v in b.items():
        a.setdefault(k, set()).update(v)


def _untraced(method):
    """``method`` with tracing suspended: simulation runs no ``hdl/`` code (the design was
    elaborated when the simulator was built), and tracing it would cost ~2.5x."""
    def run(*args, **kwargs):
        sys.settrace(None)
        try:
            return method(*args, **kwargs)
        finally:
            sys.settrace(_global)
    return run


def pytest_configure(config):
    from amaranth.sim import Simulator
    for name in ("run", "run_until", "advance"):
        setattr(Simulator, name, _untraced(getattr(Simulator, name)))
    sys.settrace(_global)
    threading.settrace(_global)


def pytest_collectstart(collector):
    _take()


def pytest_collectreport(report):
    fspath = report.nodeid.split("::")[0]
    if fspath:
        _merge(_collect.setdefault(fspath, {}), _take())


def pytest_runtest_logstart(nodeid, location):
    _take()
    _tests[nodeid] = {"start": time.perf_counter(), "outcome": "passed", "lines": {}}


def pytest_runtest_logreport(report):
    t = _tests.get(report.nodeid)
    if t is None:
        return
    if report.failed:
        t["outcome"] = "failed"
    elif report.skipped and report.when != "teardown":
        t["outcome"] = "skipped"


def pytest_runtest_logfinish(nodeid, location):
    t = _tests[nodeid]
    t["seconds"] = time.perf_counter() - t.pop("start")
    _merge(t["lines"], _take())


def pytest_unconfigure(config):
    sys.settrace(None)
    out = os.environ.get("TESSERA_LINETRACE_OUT")
    if not out:
        return
    tests = {}
    for nodeid, t in _tests.items():
        lines = {k: set(v) for k, v in t["lines"].items()}
        _merge(lines, _collect.get(nodeid.split("::")[0], {}))
        tests[nodeid] = {"outcome": t["outcome"], "seconds": round(t["seconds"], 3),
                         "lines": {str(Path(k).relative_to(_ROOT).as_posix()): sorted(v)
                                   for k, v in lines.items()}}
    Path(out).write_text(json.dumps({"tests": tests}))
