"""Sort a block's missed toggle points by the named signals they come from.

``python -m sim.verify.misses collective_ring-tiny tessera_collective_ring.engine0 [...]``
reads ``build/coverage/<variant>.missed.txt`` (written by ``make coverage``) and the coverage
build's Verilog (``build/sim/<variant>-cov/``). Most missed toggle points are of wires Yosys
names ``$123``; each is traced through the module's assignments (continuous and procedural)
to the named signals in its cone, so ``$157 = cycles + 1`` counts as the cycle counter's. The
output counts the missed points per source set, and per category of
:data:`CATEGORIES` (first match wins) with the lowest and the median missed bit: where the
median is high, the misses are the top bits of counters and fields that the tests' short
commands never reach.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: (category, source-name prefixes): a missed point goes to the first category one of whose
#: prefixes starts a name in its cone.
CATEGORIES = (
    ("cycle counter and response", ("cycles", "rsp__payload")),
    ("timeout counter", ("idle_cnt", "timeout", "progress")),
    ("command fields", ("cmd",)),
)

_ASSIGN = re.compile(r"\s*(?:assign\s+)?\\?(\$\S+?|[A-Za-z_]\S*?)\s*(?:\[[^\]]*\])?\s*<?=\s*(.*);")
_IDENT = re.compile(r"\\?([A-Za-z_$][A-Za-z0-9_$.]*)")


def module_bodies(verilog: str) -> dict[str, list[str]]:
    """``{module name: its lines}`` of a Verilog file (names without the escaping ``\\``)."""
    mods, cur = {}, None
    for line in verilog.splitlines():
        m = re.match(r"module (\S+)", line)
        if m:
            cur = m.group(1).lstrip("\\")
            mods[cur] = []
        elif cur is not None:
            mods[cur].append(line)
    return mods


def named_sources(lines: list[str]):
    """A function giving the named signals in the cone of a signal of this module."""
    deps = defaultdict(set)
    for line in lines:
        m = _ASSIGN.match(line)
        if m:
            deps[m.group(1)].update(t for t in _IDENT.findall(m.group(2))
                                    if not re.fullmatch(r"h[0-9a-fA-F]+|d\d+|b[01]+", t))
    memo = {}

    def named(sig: str, seen: frozenset = frozenset()) -> set[str]:
        if not sig.startswith("$"):
            return {sig}
        if sig in memo:
            return memo[sig]
        if sig in seen:
            return set()
        out = set()
        for d in deps.get(sig, ()):
            out |= named(d, seen | {sig})
        memo[sig] = out
        return out
    return named


def category(names: set[str]) -> str:
    for cat, prefixes in CATEGORIES:
        if any(n.startswith(p) for n in names for p in prefixes):
            return cat
    return "other (lengths, addresses, state)"


def sort_misses(missed_lines, verilog: str, module: str) -> dict:
    """``{"sources": Counter, "categories": {cat: [bits]}}`` of ``module``'s missed toggles."""
    bodies = module_bodies(verilog)
    if module not in bodies:
        raise ValueError(f"module {module!r} is not in the Verilog")
    named = named_sources(bodies[module])
    sources, cats = Counter(), defaultdict(list)
    for line in missed_lines:
        f = line.rstrip("\n").split("\t")
        if len(f) < 4 or f[0] != module or f[1] != "toggle":
            continue
        sig = f[3].split(":")[0]
        base = sig.split("[")[0]
        bit = int(sig.split("[")[1].rstrip("]")) if "[" in sig else 0
        src = named(base)
        sources[" ".join(sorted(src)) or base] += 1
        cats[category(src)].append(bit)
    return {"sources": sources, "categories": dict(cats)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variant", help="block-preset, e.g. collective_ring-tiny")
    p.add_argument("modules", nargs="+", help="Verilog module names, e.g. "
                   "tessera_collective_ring.engine0")
    p.add_argument("--top", type=int, default=20, help="source sets to list per module")
    args = p.parse_args(argv)
    missed = ROOT / "build" / "coverage" / f"{args.variant}.missed.txt"
    block = args.variant.split("-")[0]
    verilog = ROOT / "build" / "sim" / f"{args.variant}-cov" / f"tessera_{block}.v"
    for path in (missed, verilog):
        if not path.exists():
            p.error(f"{path} does not exist: run make coverage first")
    lines = missed.read_text().splitlines()
    text = verilog.read_text()
    for module in args.modules:
        res = sort_misses(lines, text, module)
        total = sum(res["sources"].values())
        print(f"{module}: {total} missed toggle points")
        for cat, bits in sorted(res["categories"].items(), key=lambda kv: -len(kv[1])):
            bits = sorted(bits)
            print(f"  {len(bits):5d}  {cat} (lowest bit {bits[0]}, median bit "
                  f"{bits[len(bits) // 2]})")
        for src, n in res["sources"].most_common(args.top):
            print(f"         {n:5d}  {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
