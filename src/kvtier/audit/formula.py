"""Claim formulas: a small, checked subset of Python expressions over published readings.

    R2.ttft_p50_s[shared_pool, 16]   a reading: table R2, column ttft_p50_s, keyed by tier and concurrency
    B.vram_ttft_s[c]                 `c` takes each value of the claim's `over` list in turn
    R4.tensor_parallel               a table with no keys (one record)
    claim["000-ckpt-write-after"]    the figure another claim asserts (for consistency checks)
    + - * / and unary minus, numbers, and comparisons inside:
    [<expression>, <expression>]     several quantities at once (e.g. two tiers), values taken together
    min_c(<comparison>)              the smallest c of `over` for which the comparison holds
    where_c(<comparison>)            every c of `over` for which the comparison holds
    measured_at(<expression>)        the values of c of `over` at which the expression has a reading

`c` is the value the claim sweeps: the concurrency, unless the claim's quantity says otherwise.

Anything else (names, calls, attributes) is refused when the ledger is loaded, naming the claim and the field.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass, field
from typing import Callable

from ..core.tiers import TIERS

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq}
AGGREGATES = ("min_c", "where_c", "measured_at")


class FormulaError(ValueError):
    """A formula that names something that does not exist or uses syntax outside the subset."""


class Unpublished(Exception):
    """Evaluation reached a table whose readings were never published."""

    def __init__(self, table: str):
        super().__init__(table)
        self.table = table


@dataclass(frozen=True)
class TableShape:
    """What a formula may name in one table: its value columns and key columns (a tier key's names are checked)."""
    columns: tuple[str, ...]
    keys: tuple[str, ...]
    published: bool
    tier_keys: tuple[str, ...] = ("tier",)


@dataclass(frozen=True)
class Ref:
    table: str
    column: str
    key: tuple  # may contain the placeholder "c"


@dataclass
class Formula:
    text: str
    tree: ast.Expression
    refs: set[Ref] = field(default_factory=set)
    claims: set[str] = field(default_factory=set)
    uses_c: bool = False
    aggregate: str | None = None

    def tables(self) -> set[str]:
        return {r.table for r in self.refs}


def parse(text: str, shapes: dict[str, TableShape], claim_ids: set[str]) -> Formula:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"not a valid expression: {exc.msg}") from None
    formula = Formula(text=text, tree=tree)
    body = tree.body
    if isinstance(body, ast.Call) and isinstance(body.func, ast.Name) and body.func.id in AGGREGATES:
        formula.aggregate = body.func.id
        if len(body.args) != 1 or body.keywords:
            raise FormulaError(f"{body.func.id}() takes exactly one argument")
        _check(body.args[0], formula, shapes, claim_ids, allow_compare=body.func.id != "measured_at")
    elif isinstance(body, ast.List) and body.elts:
        for element in body.elts:
            _check(element, formula, shapes, claim_ids, allow_compare=False)
    else:
        _check(body, formula, shapes, claim_ids, allow_compare=False)
    return formula


def _check(node, formula: Formula, shapes, claim_ids, allow_compare: bool) -> None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check(node.left, formula, shapes, claim_ids, allow_compare)
        _check(node.right, formula, shapes, claim_ids, allow_compare)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand, formula, shapes, claim_ids, allow_compare)
        return
    if isinstance(node, ast.Compare) and allow_compare and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
        _check(node.left, formula, shapes, claim_ids, False)
        _check(node.comparators[0], formula, shapes, claim_ids, False)
        return
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "claim":
        if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            raise FormulaError('claim[...] takes a claim id in quotes, e.g. claim["003-r1-after"]')
        if node.slice.value not in claim_ids:
            raise FormulaError(f"claim[{node.slice.value!r}]: no claim has that id")
        formula.claims.add(node.slice.value)
        return
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
        _check_ref(node.value, _key_parts(node.slice), formula, shapes)
        return
    if isinstance(node, ast.Attribute):
        _check_ref(node, [], formula, shapes)
        return
    raise FormulaError(f"{ast.unparse(node)!r} is not allowed here (readings like R2.ttft_p50_s[tier, c], "
                       "numbers, + - * /, min_c(...), measured_at(...), claim[\"id\"])")


def _key_parts(node) -> list:
    return list(node.elts) if isinstance(node, ast.Tuple) else [node]


def _check_ref(attr: ast.Attribute, key_nodes: list, formula: Formula, shapes: dict[str, TableShape]) -> None:
    if not isinstance(attr.value, ast.Name):
        raise FormulaError(f"{ast.unparse(attr)!r}: expected TABLE.column")
    table, column = attr.value.id, attr.attr
    if table not in shapes:
        raise FormulaError(f"unknown table {table!r} (tables: {', '.join(sorted(shapes))})")
    shape = shapes[table]
    if column not in shape.columns:
        raise FormulaError(f"unknown column {column!r} of table {table} (columns: {', '.join(shape.columns)})")
    if len(key_nodes) != len(shape.keys):
        raise FormulaError(f"{table}.{column} takes {len(shape.keys)} key(s) "
                           f"[{', '.join(shape.keys)}], got {len(key_nodes)}")
    key = []
    for name, node in zip(shape.keys, key_nodes):
        if isinstance(node, ast.Name) and node.id == "c":
            formula.uses_c = True
            key.append("c")
        elif isinstance(node, ast.Name):
            if name in shape.tier_keys and node.id not in TIERS:
                raise FormulaError(f"unknown tier {node.id!r} in {table}.{column} (tiers: {', '.join(TIERS)})")
            key.append(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, (int, str)):
            key.append(node.value)
        else:
            raise FormulaError(f"{ast.unparse(node)!r}: a key is a name, a number or c")
    formula.refs.add(Ref(table, column, tuple(key)))


Lookup = Callable[[Ref, object], object]  # (ref, c) -> value; NaN when not measured; raises Unpublished


def evaluate(formula: Formula, lookup: Lookup, claimed: Callable[[str], float], over: list | None) -> list:
    """Values of the formula: one per c of `over` (per-c formulas), or the aggregate's result(s)."""
    body = formula.tree.body
    if formula.aggregate in ("min_c", "where_c"):
        hits = [c for c in over if _eval(body.args[0], lookup, claimed, c) is True]
        if formula.aggregate == "where_c":
            return hits
        return [min(hits) if hits else math.nan]
    if formula.aggregate == "measured_at":
        return [c for c in over if not _is_missing(_eval(body.args[0], lookup, claimed, c))]
    return [value for _, value in labelled_values(formula, lookup, claimed, over)]


def labelled_values(formula: Formula, lookup: Lookup, claimed, over: list | None) -> list[tuple]:
    """[(c, value)] of a per-c or plain formula; a list formula gives one value per element per c."""
    body = formula.tree.body
    elements = body.elts if isinstance(body, ast.List) else [body]
    points = over if formula.uses_c else [None]
    return [(c, _eval(e, lookup, claimed, c)) for c in points for e in elements]


def _is_missing(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _eval(node, lookup: Lookup, claimed, c):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, lookup, claimed, c), _eval(node.right, lookup, claimed, c)
        if _is_missing(left) or _is_missing(right):
            return math.nan
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return -_eval(node.operand, lookup, claimed, c)
    if isinstance(node, ast.Compare):
        left, right = _eval(node.left, lookup, claimed, c), _eval(node.comparators[0], lookup, claimed, c)
        if _is_missing(left) or _is_missing(right):
            return False
        return _CMPOPS[type(node.ops[0])](left, right)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):  # claim["id"]
        return claimed(node.slice.value)
    attr = node.value if isinstance(node, ast.Subscript) else node
    key_nodes = _key_parts(node.slice) if isinstance(node, ast.Subscript) else []
    key = tuple(c if isinstance(k, ast.Name) and k.id == "c" else (k.id if isinstance(k, ast.Name) else k.value)
                for k in key_nodes)
    return lookup(Ref(attr.value.id, attr.attr, key), c)


def expand_refs(formula: Formula, over: list | None) -> set[Ref]:
    """Every reading the formula depends on, with c replaced by each value of `over`."""
    out = set()
    for ref in formula.refs:
        if "c" in ref.key:
            out |= {Ref(ref.table, ref.column, tuple(c if k == "c" else k for k in ref.key)) for c in over}
        else:
            out.add(ref)
    return out
