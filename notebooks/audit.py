# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A — claims audit: every numeric claim of the documents, with a verdict
#
# A claims ledger (by default `raw_data/published/claims.yaml`, for the two published documents in
# `raw_data/published/sources/`) registers every numeric statement of its documents with its exact quote, the
# evidence item it cites, the formula over raw readings that would reproduce it and the rounding or range rule
# used to compare. The `kvtier.audit` package evaluates each one against the transcribed readings (by default
# `R2_readings.csv`, the report's raw readings, and `B_readings.csv`, document 000's own table; a ledger for
# another document declares its own tables) and gives it one verdict:
#
# | verdict | meaning |
# |---|---|
# | **MISMATCH** | the readings contradict it (claimed and recomputed values shown) |
# | **AMBIGUOUS** | the text admits more than one definition; the value under each is shown |
# | **NOT-DERIVABLE** | the readings exist, but no reading or ratio of readings yields the figure |
# | **UNCHECKED** | no raw data was published for it |
# | **REPRODUCED** | the recomputed value matches under the stated rounding or range rule |
#
# Every digit of the documents is either in a registered claim's quote or in a `not_claims` entry that says why
# it is not a claim (links, identifiers, names, the publication date); a test checks this for the shipped ledger.

# %% tags=["parameters"]
claims = "../raw_data/published/claims.yaml"  # the claims ledger
published_dir = "../raw_data/published"  # the ledger's readings tables
sources_dir = ""  # the documents it quotes; empty: published_dir/sources
out_dir = ""  # evidence folder for verdicts.json/.csv and cross_checks.json/.csv; empty: write nothing

# %%
import pandas as pd
from IPython.display import Markdown, display

from kvtier.audit import audit, crosschecks, ledger, load_tables, report

registered = ledger.load(claims, published_dir, sources_dir or None)
print(f"ledger {claims}: {len(registered.claims)} claims")
for name, meta in registered.documents.items():
    print(f"  document {name}: {meta['title']}")
for name, spec in registered.tables.items():
    print(f"  readings {name}: {spec.file}, one row per {' x '.join(spec.keys) or 'document'}")
results = audit(registered, load_tables(published_dir, registered.tables))
checks = crosschecks.all_checks(results)
table = report.verdict_table(report.verdict_records(results))

# %% [markdown]
# ## Verdicts

# %% tags=["nbval-check-output"]
for verdict, n in report.counts(results).items():
    print(f"{verdict:>13}: {n}")
print(f"{'total':>13}: {len(results)}")

# %% [markdown]
# ## Every claim, sorted by verdict
#
# `claimed` is what the text says; `recomputed` is the readings' value under the claim's rule, rounded as the
# claim is (for AMBIGUOUS claims, one value per definition). The full records, with each formula and its inputs, are in `verdicts.json`.

# %%
with pd.option_context("display.max_rows", None, "display.max_colwidth", 80):
    display(table[["verdict", "id", "evidence", "claimed", "recomputed", "quote"]].style.hide(axis="index")
            .set_properties(**{"text-align": "left"}))

# %% [markdown]
# ## Cross-checks
#
# The same figure quoted in two places (do they agree, and is it the same quantity?), each table attributed to an
# evidence item (do its cells agree with that item's readings?), each range (does it cover exactly the readings
# it summarises?).

# %% tags=["nbval-check-output"]
print(pd.Series([f"{c.kind}: {c.outcome}" for c in checks]).value_counts().sort_index().to_string())

# %%
cross = pd.DataFrame([c.as_dict() for c in checks])
order = ["DIFFERS", "DOES NOT COVER", "COVERS LOOSELY", "PARTLY CHECKED", "AGREES", "COVERS EXACTLY"]
cross = cross.sort_values("outcome", key=lambda s: s.map(order.index), kind="stable")
with pd.option_context("display.max_rows", None, "display.max_colwidth", 200):
    display(cross.style.hide(axis="index").set_properties(**{"text-align": "left"}))

# %% [markdown]
# ## Findings: every claim that is not REPRODUCED
#
# Each with the quote in the original language, the document it is in, and an explanation a reader can check
# by hand against the document and the readings tables named above.

# %%
display(Markdown(report.findings_markdown(results)))

# %%
if out_dir:
    for path in report.write(results, checks, out_dir):
        print(f"wrote {path.name}")
