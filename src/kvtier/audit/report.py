"""Write the audit's results: verdicts.json (a list, one object per claim), verdicts.csv, cross_checks.json/.csv."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from ..core.atomic import write_text
from ..core.table_io import write_table
from .crosschecks import CrossCheck
from .verdicts import VERDICTS, ClaimResult

CSV_FIELDS = ("id", "source", "evidence", "verdict", "claimed", "recomputed", "quote", "explanation")


def _claimed_text(value) -> str:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return f"{value[0]}–{value[1]}"
    return json.dumps(value, ensure_ascii=False) if isinstance(value, list) else str(value)


def verdict_records(results: list[ClaimResult]) -> list[dict]:
    return [r.as_dict() for r in results]


def counts(results: list[ClaimResult]) -> dict[str, int]:
    return {v: sum(r.verdict == v for r in results) for v in VERDICTS}


def verdict_table(records: list[dict]) -> pd.DataFrame:
    """One row per claim, sorted by verdict (MISMATCH first) then id; every cell as text a reader would write."""
    rows = [{"id": rec["id"], "source": rec["source"], "evidence": ", ".join(rec["evidence"]),
             "verdict": rec["verdict"], "claimed": _claimed_text(rec["claimed"]),
             "recomputed": rec["recomputed_text"], "quote": rec["quote"], "explanation": rec["explanation"]}
            for rec in records]
    frame = pd.DataFrame(rows, columns=list(CSV_FIELDS))
    order = {v: i for i, v in enumerate(VERDICTS)}
    return frame.sort_values(["verdict", "id"], key=lambda s: s.map(order) if s.name == "verdict" else s,
                             ignore_index=True)


def write(results: list[ClaimResult], checks: list[CrossCheck], out_dir: str | os.PathLike) -> list[Path]:
    out_dir = Path(out_dir)
    records = verdict_records(results)
    return [
        write_text(out_dir / "verdicts.json", json.dumps(records, indent=2, ensure_ascii=False) + "\n"),
        write_table(verdict_table(records), out_dir / "verdicts.csv"),
        write_text(out_dir / "cross_checks.json",
                   json.dumps([c.as_dict() for c in checks], indent=2, ensure_ascii=False) + "\n"),
        write_table(pd.DataFrame([c.as_dict() for c in checks], columns=["kind", "subject", "outcome", "detail"]),
                    out_dir / "cross_checks.csv"),
    ]


def write_statements(records: list[dict], out_dir: str | os.PathLike) -> list[Path]:
    """Document 000's boundary statements evaluated on a measured map (kvtier.audit.shapes)."""
    from .shapes import table
    out_dir = Path(out_dir)
    return [write_text(out_dir / "boundary_statements.json", json.dumps(records, indent=2, ensure_ascii=False) + "\n"),
            write_table(table(records), out_dir / "boundary_statements.csv")]


def findings_markdown(results: list[ClaimResult]) -> str:
    """Every claim that is not REPRODUCED, worst first, with what a reader needs to check it by hand."""
    order = {v: i for i, v in enumerate(VERDICTS)}
    blocks = []
    for r in sorted((r for r in results if r.verdict != "REPRODUCED"),
                    key=lambda r: (order[r.verdict], r.claim.id)):
        c = r.claim
        cited = ", ".join(c.evidence) or "none"
        body = r.summary + ("\n" if r.definitions else "") + "".join(f"\n- {line}" for line in r.definitions)
        if c.note:
            body += f"\n\n*Note:* {c.note}"
        blocks.append(
            f"#### {r.verdict} · `{c.id}`\n\n"
            f"> {c.quote.replace(chr(9), ' · ')}\n\n"
            f"Document `{c.source}` · cites {cited} · claimed **{json.dumps(c.claimed, ensure_ascii=False)}**\n\n"
            f"{body}\n")
    return "\n".join(blocks)
