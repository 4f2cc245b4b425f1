"""Specialise the formula: constant-folded numpy variants per mode, the scalar source numba
compiles, and scalar Python for the round terms.

`scalar(fn)` (and `packed_source` for numba) rewrites calls on the ops namespace `O`:
`O.where(c, a, b)` becomes `(a if c else b)`, `O.maximum`/`O.minimum` become `max`/`min`,
`O.sqrt`/`O.floor` their `math` forms. Nothing else changes, so the scalar function performs
the same IEEE operations in the same order as numpy does on arrays: both agree bit for bit.

Reason bits set by `flag * BIT` become `BIT if flag else 0` in scalar code (the same int).

`fixing(name=value)` replaces a variable by a constant and folds what becomes constant
(`O.where(True, a, b)` is `a`, `x & True` is `x`), so a batch whose rows share a mode skips the
other mode's terms. The surviving operations are unchanged, so results are unchanged too.

`packed_source` also turns table reads `T.x[key]` into reads of two packed arrays, at offsets
`twin.kernel.jit` lays out. `flat_source` gives the same scalar formula as branch-free
statements (each selection between named, already computed values) for the batch loop.
"""

from __future__ import annotations
import __future__

import ast
import inspect
import math
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np

_CALLS = {"maximum": "max", "minimum": "min", "sqrt": "_sqrt", "floor": "_floor"}


def _floor(x: float) -> float:
    """math.floor as a float (numpy's floor keeps the dtype)."""
    return float(math.floor(x))


class _Fix(ast.NodeTransformer):
    """Replace names by constants, then fold selections and boolean ands on constants."""

    def __init__(self, values: dict[str, bool]) -> None:
        self.values = values

    def visit_Assign(self, node: ast.Assign) -> ast.AST | None:
        targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if any(t in self.values for t in targets):
            return None  # the fixed variable's own definition goes away
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return ast.copy_location(ast.Constant(self.values[node.id]), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "O"
            and func.attr == "where"
            and isinstance(node.args[0], ast.Constant)
        ):
            return node.args[1] if node.args[0].value else node.args[2]
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.BitAnd):
            for keep, const in ((node.left, node.right), (node.right, node.left)):
                if isinstance(const, ast.Constant) and const.value is True:
                    return keep
        return node


def _is_flag(node: ast.expr) -> bool:
    """A comparison, or comparisons joined by `|` / `&`: a bool in scalar code."""
    if isinstance(node, ast.Compare):
        return True
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.BitOr | ast.BitAnd)
        and _is_flag(node.left)
        and _is_flag(node.right)
    )


class _Bits(ast.NodeTransformer):
    """`flag * BIT` (a reason bit set when a flag holds) becomes `BIT if flag else 0`: the same
    int, without Python's generic bool-times-int multiplication. Runs after `_Constants`."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        bit = node.right
        if (
            isinstance(node.op, ast.Mult)
            and _is_flag(node.left)
            and isinstance(bit, ast.Constant)
            and type(bit.value) is int
        ):
            return ast.copy_location(
                ast.IfExp(test=node.left, body=bit, orelse=ast.Constant(0)), node
            )
        return node


def _simple(node: ast.expr) -> bool:
    return isinstance(node, ast.Name | ast.Constant)


class _Constants(ast.NodeTransformer):
    """Module constants (upper-case names bound to numbers) become literals."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.values = {
            k: v
            for k, v in namespace.items()
            if k.isupper() and isinstance(v, int | float) and not isinstance(v, bool)
        }

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return ast.copy_location(ast.Constant(self.values[node.id]), node)
        return node


class _Inline(ast.NodeTransformer):
    """Ops calls become inline Python."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            return node
        if func.value.id != "O":
            return node
        if func.attr == "where":
            cond, yes, no = node.args
            return ast.copy_location(ast.IfExp(test=cond, body=yes, orelse=no), node)
        if func.attr in ("maximum", "minimum") and all(_simple(a) for a in node.args):
            # np.maximum(a, b) is a when a >= b (no NaNs here); likewise minimum with <=.
            a, b = node.args
            op: ast.cmpop = ast.GtE() if func.attr == "maximum" else ast.LtE()
            test = ast.Compare(left=a, ops=[op], comparators=[b])
            return ast.copy_location(ast.IfExp(test=test, body=a, orelse=b), node)
        if func.attr in _CALLS:
            name = ast.Name(id=_CALLS[func.attr], ctx=ast.Load())
            return ast.copy_location(ast.Call(func=name, args=node.args, keywords=[]), node)
        raise ValueError(f"formula uses O.{func.attr}, which has no scalar form")


def _drop_dead(tree: ast.Module) -> None:
    """Remove assignments to names nothing reads (what folding made unreachable)."""
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    while True:
        used = {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        body = [
            stmt
            for stmt in fn.body
            if not (
                isinstance(stmt, ast.Assign)
                and all(isinstance(t, ast.Name) and t.id not in used for t in stmt.targets)
            )
        ]
        if len(body) == len(fn.body):
            return
        fn.body = body


def _rebuild(fn: Callable[..., Any], *transformers: ast.NodeTransformer) -> Callable[..., Any]:
    lines, first_line = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first_line - 1)  # tracebacks point at the formula's own lines
    for transformer in transformers:
        tree = transformer.visit(tree)
    _drop_dead(tree)
    tree = ast.fix_missing_locations(tree)
    code = compile(
        tree,
        inspect.getsourcefile(fn) or "<formula>",
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    namespace: dict[str, Any] = {**fn.__globals__, "_sqrt": math.sqrt, "_floor": _floor}
    exec(code, namespace)
    compiled: Callable[..., Any] = namespace[fn.__name__]
    return compiled


def scalar(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The scalar twin of a formula function that reads no tables (same signature; `O` is
    ignored). The formula itself, which reads tables, is compiled by `twin.kernel.jit`."""
    return _rebuild(fn, _Constants(fn.__globals__), _Bits(), _Inline())


def fixing(fn: Callable[..., Any], **fixed: bool) -> Callable[..., Any]:
    """The array formula with some variables fixed to constants (and folded)."""
    return _rebuild(fn, _Fix(fixed))


class NumpyOps:
    """The array form of the ops namespace."""

    where = staticmethod(np.where)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    sqrt = staticmethod(np.sqrt)
    floor = staticmethod(np.floor)


Slot = tuple[str, int, int]
"""Where a table lives in the packed arrays: ("F" floats or "I" ints, offset, row width)."""


def _table_read(node: ast.AST) -> str | None:
    """The table `T.x[key]` reads (`x`), or None for any other node."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "T"
    ):
        return node.value.attr
    return None


def table_keys(fn: Callable[..., Any]) -> dict[str, str]:
    """Each table the formula reads (`T.x[key]`), with its key expression (one per table)."""
    keys: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(fn)))):
        if (table := _table_read(node)) is not None:
            assert isinstance(node, ast.Subscript)
            keys.setdefault(table, set()).add(ast.unparse(node.slice))
    several = {k: v for k, v in keys.items() if len(v) > 1}
    if several:
        raise ValueError(f"tables read with more than one key cannot be packed: {several}")
    return {k: next(iter(v)) for k, v in keys.items()}


class _Packed(ast.NodeTransformer):
    """`T.x[key]` becomes a read of the packed array at `key * width + offset`; `T.n` (ints)
    becomes the literal."""

    def __init__(self, slots: dict[str, Slot], ints: dict[str, int]) -> None:
        self.slots = slots
        self.ints = ints

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        table = _table_read(node)
        if table is None:
            return node
        array, offset, width = self.slots[table]
        index: ast.expr = node.slice
        if width > 1:
            index = ast.BinOp(left=index, op=ast.Mult(), right=ast.Constant(width))
        if offset:
            index = ast.BinOp(left=index, op=ast.Add(), right=ast.Constant(offset))
        return ast.copy_location(
            ast.Subscript(value=ast.Name(id=array, ctx=ast.Load()), slice=index, ctx=ast.Load()),
            node,
        )

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "T" and node.attr in self.ints:
            return ast.copy_location(ast.Constant(self.ints[node.attr]), node)
        return node


def _scalar_tree(fn: Callable[..., Any], name: str, slots: dict[str, Slot], ints: dict[str, int],
                 **fixed: bool) -> ast.Module:  # fmt: skip
    """The formula as a scalar function over the packed arrays `F` and `I` (passed first
    instead of `O` and `T`); same operations, same order."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    for transformer in (_Fix(fixed), _Packed(slots, ints), _Constants(fn.__globals__), _Bits(),
                        _Inline()):  # fmt: skip
        tree = transformer.visit(tree)
    _drop_dead(tree)
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef)
    func.name = name
    params = [a for a in func.args.args if a.arg not in ("O", "T")]
    func.args.args = [ast.arg("F"), ast.arg("I"), *params]
    for a in func.args.args:
        a.annotation = None
    func.returns = None
    func.body = [s for s in func.body if not (isinstance(s, ast.Expr)
                                                and isinstance(s.value, ast.Constant))]  # fmt: skip
    return tree


def packed_source(
    fn: Callable[..., Any], name: str, slots: dict[str, Slot], ints: dict[str, int],
    **fixed: bool,
) -> str:  # fmt: skip
    """The scalar formula as source text for numba: tables read from the packed arrays `F`
    (floats) and `I` (ints), passed first instead of `O` and `T`; same operations, same order."""
    return ast.unparse(ast.fix_missing_locations(_scalar_tree(fn, name, slots, ints, **fixed)))


class _Hoist(ast.NodeTransformer):
    """Every conditional expression selects between names: each arm and test that is not a
    name or constant becomes a temporary assigned before the statement. Both arms are then
    always computed (as numpy computes both), and the selection compiles to a branch-free
    `select` that LLVM can vectorise."""

    def __init__(self) -> None:
        self.count = 0
        self.pending: list[ast.stmt] = []

    def _name(self, node: ast.expr) -> ast.expr:
        if _simple(node):
            return node
        self.count += 1
        name = f"_v{self.count}"
        self.pending.append(ast.Assign(targets=[ast.Name(name, ast.Store())], value=node))
        return ast.Name(name, ast.Load())

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        return ast.IfExp(self._name(node.test), self._name(node.body), self._name(node.orelse))

    def hoist(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            self.pending = []
            hoisted = self.visit(stmt)
            out += [*self.pending, hoisted]
        return out


def flat_source(
    fn: Callable[..., Any], slots: dict[str, Slot], ints: dict[str, int]
) -> tuple[list[str], list[str], list[str]]:
    """The formula (both modes) as branch-free statements to inline into a loop: its parameter
    names (after `O` and `T`), its statements, and its returned expressions. Same operations
    in the same order as numpy (which also computes both arms of every `where`)."""
    func = _scalar_tree(fn, "flat", slots, ints).body[0]
    assert isinstance(func, ast.FunctionDef)
    *body, last = func.body
    assert isinstance(last, ast.Return)
    assert isinstance(last.value, ast.Tuple)
    returned = [ast.Name(f"_out{k}", ast.Load()) for k in range(len(last.value.elts))]
    body += [ast.Assign(targets=[ast.Name(r.id, ast.Store())], value=v)
             for r, v in zip(returned, last.value.elts, strict=True)]  # fmt: skip
    body = _Hoist().hoist(body)
    params = [a.arg for a in func.args.args[2:]]
    lines = [ast.unparse(ast.fix_missing_locations(s)) for s in body]
    return params, lines, [r.id for r in returned]
