"""The claims audit (evidence item A): every numeric claim of the published documents, recomputed, with a verdict.

One module per job: `ledger` parses and validates claims.yaml, `formula` parses and evaluates claim formulas,
`rules` compares a recomputed value with a claimed one, `verdicts` decides each claim, `crosschecks` compares
claims with each other, `report` writes the results.
"""

from .verdicts import VERDICTS, audit, load_tables  # noqa: F401
