"""Bits of Amaranth's generated Verilog that no stimulus can toggle, found from the text.

Amaranth (through Yosys' Verilog backend) writes one statement per line and declares every
signal as ``wire``/``reg [h:l] name;``. Two kinds of bits are structurally dead for toggle
coverage, and :func:`dead_bits` finds both, per module, for signals that are not ports:

* **unread**: bits no expression of the module ever reads. Amaranth sizes an intermediate
  for the widest result of its operator (``a << b`` is ``len(a) + 2**len(b) - 1`` bits wide, a
  ``Mux`` of a narrow and a wide value is as wide as the wide one) and the consumer slices the
  bits it needs (``\\$331 [31:0]``). The other bits exist in the Verilog but drive nothing.
* **constant**: bits of a signal assigned once, by ``assign``, from a constant or from a
  concatenation whose parts include constants (``{ 8'h00, s5_base, 23'h000000 }``).

For line (branch) coverage, :func:`dead_arm` finds the arms of ``if`` statements whose
condition is constant: a literal (``if (1'h1)``) or a one-bit signal of the module whose only
driver is ``assign name = 1'h1;`` (or ``1'h0``). A pipeline built for a consumer that is always
ready has its stage enable tied that way (``assign add_en = 1'h1;`` in an FP32 unit whose
``o.ready`` is constant inside the core), and Verilator still counts the arm the enable never
selects.

A read is any occurrence of the name outside the left-hand side of an assignment (and
outside the ``.port(`` name of an instance's connection; the connected expression counts as
read even when the port is an output); a read
with a constant part-select (``x[7:0]``, ``x[3]``) uses those bits, any other read (a
variable index, the whole name) uses all bits. This over-approximates what is read, so a bit
is reported unread only if it really is.
"""
from __future__ import annotations

import re
from collections import defaultdict

__all__ = ["dead_bits", "dead_arm", "constant_signals", "declarations", "split_modules"]

_NAME = r"(?:\\\S+\s|[A-Za-z_][A-Za-z0-9_$]*)"
_DECL_RE = re.compile(r"^\s*(input|output|inout|wire|reg)\s+(?:signed\s+)?(?:\[(\d+):(\d+)\]\s*)?"
                      rf"({_NAME})")
_MODULE_RE = re.compile(rf"^module\s+({_NAME})")
_TOKEN_RE = re.compile(rf"{_NAME}")
_CONST_RE = re.compile(r"^(\d+)'([hdbo])([0-9a-fA-FxXzZ_]+)$")
_SLICE_RE = re.compile(r"\s*\[(\d+)(?::(\d+))?\]")
_LHS_RE = re.compile(rf"^\s*(?:assign\s+)?({_NAME})\s*(?:\[[^\]]*\]\s*)?<?=(?!=)")


def _clean(name: str) -> str:
    """``\\$335 `` -> ``$335`` (the name as Verilator's coverage reports it)."""
    return name[1:].strip() if name.startswith("\\") else name.strip()


def split_modules(text: str) -> dict[str, list[str]]:
    """Lines of each ``module ... endmodule`` of a Verilog file, by (unescaped) module name."""
    modules, current, name = {}, None, None
    for line in text.splitlines():
        m = _MODULE_RE.match(line)
        if m:
            name, current = _clean(m.group(1)), []
        if current is not None:
            current.append(line)
        if line.startswith("endmodule") and current is not None:
            modules[name] = current
            current = None
    return modules


def _const_bits(expr: str, widths: dict[str, int]) -> dict[int, int] | None:
    """Bits of ``expr`` (a constant or a concatenation) that are constant: bit -> value.
    ``None`` when a part's width is not known."""
    expr = expr.strip().rstrip(";").strip()
    if expr.startswith("{") and expr.endswith("}") and "{" not in expr[1:-1]:
        parts = [p.strip() for p in expr[1:-1].split(",")]
    else:
        parts = [expr]
    out, pos = {}, 0
    for part in reversed(parts):      # the last part is the least significant
        c = _CONST_RE.match(part)
        if c:
            width = int(c.group(1))
            digits = c.group(3).replace("_", "")
            if re.search("[xXzZ]", digits):
                return None
            value = int(digits, {"h": 16, "d": 10, "b": 2, "o": 8}[c.group(2)])
            for i in range(width):
                out[pos + i] = (value >> i) & 1
            pos += width
            continue
        t = _TOKEN_RE.match(part)
        if not t or _clean(t.group(0)) not in widths:
            return None
        rest = part[t.end():]
        if not rest.strip():
            width = widths[_clean(t.group(0))]
        else:
            s = _SLICE_RE.match(rest)
            if not s or rest[s.end():].strip():
                return None
            width = 1 if s.group(2) is None else int(s.group(1)) - int(s.group(2)) + 1
        pos += width
    return out


def declarations(lines: list[str]) -> tuple[dict[str, tuple[int, int]], set[str], set[int]]:
    """Of one module's lines: ``{name: (msb, lsb)}`` of its signals (memories left out), the
    names of its ports, and the indices of the declaration lines."""
    decl: dict[str, tuple[int, int]] = {}
    ports: set[str] = set()
    decl_lines: set[int] = set()
    for i, line in enumerate(lines):
        m = _DECL_RE.match(line)
        if m:
            decl_lines.add(i)
        if m and "[" not in line[m.end():]:     # a memory (`reg [7:0] mem [15:0]`) is skipped
            name = _clean(m.group(4))
            decl[name] = (int(m.group(2)), int(m.group(3))) if m.group(2) else (0, 0)
            if m.group(1) in ("input", "output", "inout"):
                ports.add(name)
    return decl, ports, decl_lines


def dead_bits(lines: list[str]) -> dict[str, dict[str, set[int]]]:
    """``{"unread": {signal: bits}, "constant": {signal: bits}}`` of one module's lines, for
    its non-port signals (bits numbered from the declared LSB, which Amaranth makes 0)."""
    decl, ports, decl_lines = declarations(lines)
    widths = {n: hi - lo + 1 for n, (hi, lo) in decl.items()}
    read: dict[str, set[int]] = defaultdict(set)
    assigns: dict[str, list[str]] = defaultdict(list)   # right-hand sides of `assign`
    drivers: dict[str, int] = defaultdict(int)
    for i, line in enumerate(lines):
        if i in decl_lines or _MODULE_RE.match(line):
            continue
        start = 0
        lhs = _LHS_RE.match(line)
        if lhs:
            name = _clean(lhs.group(1))
            drivers[name] += 1
            if line.lstrip().startswith("assign"):
                assigns[name].append(line[lhs.end():])
            start = lhs.end()
        for t in _TOKEN_RE.finditer(line, start):
            name = _clean(t.group(0))
            if name not in decl or line[:t.start()].endswith("."):   # `.port(` of an instance
                continue
            hi, lo = decl[name]
            s = _SLICE_RE.match(line, t.end())
            if s:
                a = int(s.group(1))
                b = a if s.group(2) is None else int(s.group(2))
                read[name].update(range(min(a, b) - lo, max(a, b) - lo + 1))
            else:
                read[name].update(range(widths[name]))
    unread, constant = {}, {}
    for name, width in widths.items():
        if name in ports:
            continue
        missing = set(range(width)) - read[name]
        if missing:
            unread[name] = missing
        if drivers[name] == 1 and len(assigns[name]) == 1:
            bits = _const_bits(assigns[name][0], widths)
            if bits:
                constant[name] = {b for b in bits if b < width} - missing
    return {"unread": unread, "constant": {k: v for k, v in constant.items() if v}}


_IF_RE = re.compile(rf"^\s*(?:end\s+else\s+)?if\s*\(\s*({_NAME}|1'h[01])\s*\)\s*begin\s*$")


def constant_signals(lines: list[str]) -> dict[str, int]:
    """``{name: value}`` of one module's one-bit non-port signals whose only driver is one
    ``assign name = 1'hV;``."""
    decl, ports, decl_lines = declarations(lines)
    drivers: dict[str, int] = defaultdict(int)
    value: dict[str, int] = {}
    for i, line in enumerate(lines):
        if i in decl_lines or _MODULE_RE.match(line):
            continue
        lhs = _LHS_RE.match(line)
        if not lhs:
            continue
        name = _clean(lhs.group(1))
        drivers[name] += 1
        rhs = line[lhs.end():].strip().rstrip(";").strip()
        if line.lstrip().startswith("assign") and rhs in ("1'h0", "1'h1"):
            value[name] = int(rhs[-1])
    return {n: v for n, v in value.items()
            if drivers[n] == 1 and n not in ports and decl.get(n) == (0, 0)}


def dead_arm(line: str, constants: dict[str, int]) -> str | None:
    """The arm of ``line`` (one line of a module) that can never be taken, as Verilator names
    its branch points, if ``line`` opens an ``if`` with a constant condition (a literal, or a
    signal of ``constants`` = :func:`constant_signals` of the module): ``"else"`` when the
    condition is always 1, ``"if"`` (``"elsif"`` after ``end else``) when it is always 0;
    otherwise ``None``."""
    m = _IF_RE.match(line)
    if not m:
        return None
    cond = m.group(1)
    v = int(cond[-1]) if cond in ("1'h0", "1'h1") else constants.get(_clean(cond))
    if v is None:
        return None
    if v:
        return "else"
    return "elsif" if re.match(r"^\s*end\s+else", line) else "if"
