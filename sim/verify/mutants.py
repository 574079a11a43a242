"""Mutation sites of the Amaranth sources and the mutant source of each (Python ``ast``).

One mutant changes one site of one file of ``hdl/``. The operators (``OPERATORS``):

``BINOP``
    A binary operator swapped: ``+``↔``-``, ``&``↔``|``, ``^``→``|``, ``<<``↔``>>``.
``CMP``
    A comparison swapped: ``==``↔``!=``, ``<``→``<=``, ``<=``→``<``, ``>``→``>=``, ``>=``→``>``.
``CONST``
    An integer literal ``n`` → ``n - 1`` (``0`` → ``1``; ``True``/``False`` are not integers here).
``COND``
    The condition of an ``m.If(c)`` / ``m.Elif(c)`` negated: ``(c) == 0``.
``EQ0``
    The source of an assignment ``x.eq(v)`` replaced with ``0`` (unless it already is ``0``).

Sites that cannot change the generated design are not mutated: docstrings and strings (only
integers are mutated), ``__repr__``/``__str__``, the ``params`` functions of the block registry
(``Block(..., params=f)``: the JSON written beside the Verilog), ``raise`` and ``assert`` statements, f-strings,
``warnings.warn`` calls, function annotations, augmented assignments (``m.d.comb += ...`` is
statement syntax, not arithmetic), and parameter-validation guards (an ``if`` whose body only
raises: it rejects invalid parameters, which the ValueError tests cover, and leaves every valid
design unchanged). Modules that only drive tools, not the design (``EXCLUDED_FILES``), have no
sites.

A mutant's ``id`` is stable across edits elsewhere in the file: a hash of the file, the
enclosing function, the operator, the original and mutated expression (normalised by
``ast.unparse``) and its occurrence number among identical keys, not of the line number.
"""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OPERATORS", "EXCLUDED_FILES", "Mutant", "file_mutants", "all_mutants"]

OPERATORS = ("BINOP", "CMP", "CONST", "COND", "EQ0")

#: Files of ``hdl/`` without design content: the command line, Verilog writing, the block
#: registry and the ISA documentation generator.
EXCLUDED_FILES = ("hdl/cli.py", "hdl/gen.py", "hdl/registry.py", "hdl/core/isadoc.py")

_BINOPS = {ast.Add: (ast.Sub, "+", "-"), ast.Sub: (ast.Add, "-", "+"),
           ast.BitAnd: (ast.BitOr, "&", "|"), ast.BitOr: (ast.BitAnd, "|", "&"),
           ast.BitXor: (ast.BitOr, "^", "|"),
           ast.LShift: (ast.RShift, "<<", ">>"), ast.RShift: (ast.LShift, ">>", "<<")}
_CMPS = {ast.Eq: (ast.NotEq, "==", "!="), ast.NotEq: (ast.Eq, "!=", "=="),
         ast.Lt: (ast.LtE, "<", "<="), ast.LtE: (ast.Lt, "<=", "<"),
         ast.Gt: (ast.GtE, ">", ">="), ast.GtE: (ast.Gt, ">=", ">")}
_SKIP_FUNCS = {"__repr__", "__str__", "__format__"}


def _params_functions(tree) -> set[str]:
    """Functions given as ``Block(..., params=f)``: they build the JSON written beside the
    Verilog, a description of the design for software, not the design."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "params" and isinstance(kw.value, ast.Name):
                    out.add(kw.value.id)
    return out


@dataclass(frozen=True)
class Mutant:
    """One mutation of one site.

    Attributes
    ----------
    id : str
        Stable identifier (12 hex digits), the key of the equivalence table.
    path : str
        File, relative to the repository root (``hdl/fp32/add.py``).
    line, end_line : int
        Lines the mutated expression spans.
    scope : str
        Enclosing ``Class.function`` (``<module>`` at top level).
    operator : str
        One of :data:`OPERATORS`.
    original, mutated : str
        The changed part before and after (``"<"`` → ``"<="``, ``"3"`` → ``"2"``, a condition).
    start, end : int
        Byte offsets of the replaced span in the file.
    replacement : str
        Source text replacing ``[start, end)``.
    module_level : bool
        Outside any function (module or class body): runs once, at import.
    """

    id: str
    path: str
    line: int
    end_line: int
    scope: str
    operator: str
    original: str
    mutated: str
    start: int
    end: int
    replacement: str
    module_level: bool

    def apply(self, source: bytes) -> bytes:
        """The mutant's source of the file whose original source is ``source``."""
        return source[:self.start] + self.replacement.encode() + source[self.end:]

    def describe(self) -> str:
        return f"{self.path}:{self.line} {self.operator} {self.original} -> {self.mutated}"

    def code(self, source: bytes) -> str:
        """The source lines the mutated expression spans (``line`` .. ``end_line`` of
        ``source``, the file's original source), whitespace runs collapsed to one space: the
        ``code`` an entry of the equivalence table records, so that an entry whose id has come
        to name another site (ids count identical sites in order: a new one earlier in the
        function shifts them) is noticed."""
        lines = source.decode().splitlines()[self.line - 1:self.end_line]
        return " ".join(" ".join(lines).split())


def _is_raise_guard(node: ast.If) -> bool:
    return all(isinstance(s, ast.Raise) for s in node.body) and not node.orelse


def _is_warn(node: ast.Call) -> bool:
    f = node.func
    return isinstance(f, ast.Attribute) and f.attr == "warn"


class _Sites(ast.NodeVisitor):
    def __init__(self, path: str, source: bytes, skip_funcs: set[str]):
        self.path = path
        self.skip_funcs = skip_funcs
        self.source = source
        starts, pos = [], 0
        for line in source.splitlines(keepends=True):
            starts.append(pos)
            pos += len(line)
        starts.append(pos)
        self.line_starts = starts
        self.scope: list[str] = []
        self.depth = 0          # function nesting
        self.found: list[tuple] = []

    # --- positions ---------------------------------------------------------------------------
    def _span(self, node) -> tuple[int, int]:
        return (self.line_starts[node.lineno - 1] + node.col_offset,
                self.line_starts[node.end_lineno - 1] + node.end_col_offset)

    def _text(self, node) -> str:
        a, b = self._span(node)
        return self.source[a:b].decode()

    def _add(self, node, operator, original, mutated, replacement, key_mut):
        start, end = self._span(node)
        self.found.append((node.lineno, node.end_lineno, ".".join(self.scope) or "<module>",
                           operator, original, mutated, start, end, replacement,
                           ast.unparse(node), key_mut, self.depth == 0))

    # --- skipped contexts --------------------------------------------------------------------
    def _visit_function(self, node):
        if node.name in self.skip_funcs:
            return
        for d in node.decorator_list:
            self.visit(d)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(default)
        self.scope.append(node.name)
        self.depth += 1
        for stmt in node.body:
            self.visit(stmt)
        self.depth -= 1
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node):
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_Raise(self, node):
        pass

    def visit_Assert(self, node):
        pass

    def visit_JoinedStr(self, node):
        pass

    def visit_AugAssign(self, node):
        self.visit(node.value)

    def visit_If(self, node):
        if _is_raise_guard(node):
            return
        self.generic_visit(node)

    # --- sites -------------------------------------------------------------------------------
    def visit_BinOp(self, node):
        if type(node.op) in _BINOPS:
            new_op, old_s, new_s = _BINOPS[type(node.op)]
            rep = f"(({self._text(node.left)}) {new_s} ({self._text(node.right)}))"
            self._add(node, "BINOP", old_s, new_s, rep,
                      ast.unparse(ast.BinOp(node.left, new_op(), node.right)))
        self.generic_visit(node)

    def visit_Compare(self, node):
        for i, op in enumerate(node.ops):
            if type(op) not in _CMPS:
                continue
            _, old_s, new_s = _CMPS[type(op)]
            parts = [f"({self._text(node.left)})"]
            for j, (o, c) in enumerate(zip(node.ops, node.comparators)):
                s = new_s if j == i else _op_text(o)
                parts.append(f"{s} ({self._text(c)})")
            self._add(node, "CMP", old_s, new_s, "(" + " ".join(parts) + ")", f"{i}:{new_s}")
        self.generic_visit(node)

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, int) and not isinstance(v, bool):
            new = v - 1 if v > 0 else v + 1
            self._add(node, "CONST", str(v), str(new), str(new), str(new))

    def visit_Call(self, node):
        if _is_warn(node):
            return
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("If", "Elif") and node.args:
            c = node.args[0]
            self._add(c, "COND", _short(self._text(c)), f"not ({_short(self._text(c))})",
                      f"(({self._text(c)}) == 0)", "COND")
        if (isinstance(f, ast.Attribute) and f.attr == "eq" and len(node.args) == 1
                and not node.keywords):
            v = node.args[0]
            if not (isinstance(v, ast.Constant) and v.value == 0):
                self._add(v, "EQ0", _short(self._text(v)), "0", "0", "EQ0")
        self.generic_visit(node)

    def visit_arg(self, node):
        pass        # annotations of parameters are not design

    def visit_Lambda(self, node):
        self.depth += 1
        self.visit(node.body)
        self.depth -= 1


def _op_text(op) -> str:
    return {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
            ast.GtE: ">=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
            ast.NotIn: "not in"}[type(op)]


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


def file_mutants(root: Path, path: str) -> list[Mutant]:
    """Every mutant of ``root/path`` (``path`` relative, e.g. ``hdl/fp32/add.py``)."""
    source = (root / path).read_bytes()
    tree = ast.parse(source)
    v = _Sites(path, source, _SKIP_FUNCS | _params_functions(tree))
    v.visit(tree)
    seen: dict[tuple, int] = {}
    out = []
    for (line, end_line, scope, op, orig, mut, start, end, rep, node_src, key_mut,
         module_level) in v.found:
        key = (path, scope, op, node_src, key_mut)
        n = seen.get(key, 0)
        seen[key] = n + 1
        mid = hashlib.sha1(repr(key + (n,)).encode()).hexdigest()[:12]
        out.append(Mutant(mid, path, line, end_line, scope, op, orig, mut, start, end, rep,
                          module_level))
    return out


def all_mutants(root: Path) -> list[Mutant]:
    """Every mutant of every ``hdl/**/*.py`` outside :data:`EXCLUDED_FILES`, in file order."""
    out = []
    for p in sorted((root / "hdl").rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel not in EXCLUDED_FILES:
            out.extend(file_mutants(root, rel))
    return out
