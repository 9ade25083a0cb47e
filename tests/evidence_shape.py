"""The shape of a project's rendered evidence: every file, and for every CSV table its columns and the keys of its
rows (its first column). Measured numbers differ from run to run; the shape does not, whichever executor ran the
pipeline. tests/golden/test_preset_evidence.json is the shape of a local run of the test preset:

    snakemake --cores 2 --configfile config/presets/test.yaml          # in a fresh copy of the project
    python tests/evidence_shape.py . > tests/golden/test_preset_evidence.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

# Tables whose rows are what the runs measured differently (R4: the platform fields that differ between runs; B's
# outputs compared round by round: a sequential run measures some cells in more rounds than others, and replays
# requests of its last round; the campaign's windows round by round: its sequential rounds measure again only the
# units whose comparisons were undecided).
ROWS_VARY = ("R4/", "B/B_correctness.csv", "B/B_replays.csv", "R2_local/R2_local_attribution.csv",
             "R2_local/R2_local_correctness.csv", "R3/R3_attribution.csv", "R3/R3_correctness.csv")
# Tables whose columns are the runs (R4: one per run, and the campaign's further rounds have as many as they took).
COLUMNS_VARY = ("R4/",)


def evidence_shape(project: str | Path) -> dict:
    evidence = Path(project) / "evidence"
    shape = {}
    for path in sorted(p for p in evidence.rglob("*") if p.is_file()):
        name = path.relative_to(evidence).as_posix()
        if path.suffix != ".csv":
            shape[name] = None
            continue
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
        shape[name] = {"columns": None if name.startswith(COLUMNS_VARY) else list(table.columns),
                       "rows": None if name.startswith(ROWS_VARY) else table.iloc[:, 0].tolist()}
    return shape


if __name__ == "__main__":
    print(json.dumps(evidence_shape(sys.argv[1] if len(sys.argv) > 1 else "."), indent=1))
