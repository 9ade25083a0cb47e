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
# # R2 — tiered cold resume: the published readings, replayed
#
# The report prints one table of raw readings (document `003`, section “原始读数”): TTFT p50 and output tok/s
# for the FX100 shared pool, one local NVMe drive and full recompute, at concurrency 8, 16 and 32. This notebook
# regenerates that table from the transcribed readings in `raw_data/published/R2_readings.csv` and recomputes
# the figures the report's text derives from it. Every number below is computed by the `kvtier` package
# (`kvtier.evidence.r2`, `kvtier.evidence.tables`); the notebook only shows it. Whether the text's claims match
# these figures is the audit's job (evidence item A), not this page's.

# %% tags=["parameters"]
published_dir = "../raw_data/published"  # transcribed readings, provenance and stated conditions
out_dir = ""  # evidence folder for the tables and charts; empty: write nothing (interactive use, tests)
chart_png_scale = 2.0

# %%
from pathlib import Path

from IPython.display import SVG, Markdown, display

from kvtier.core.config import load_yaml
from kvtier.evidence import charts, r2

derived = r2.load(published_dir)

# %% [markdown]
# ## Conditions stated by the report

# %%
display(Markdown(r2.conditions_markdown(load_yaml(Path(published_dir) / r2.CONDITIONS_FILE),
                                        load_yaml(Path(published_dir) / r2.PROVENANCE_FILE))))

# %% [markdown]
# ## The published table, regenerated
#
# Same columns, labels and precision as the report; `—` marks a cell the report did not measure (recompute was
# run at concurrency 16 only). A test compares this text with the table in the source document.

# %%
display(r2.report_table(derived).style.hide(axis="index"))

# %% [markdown]
# The same table as markdown text, as the report's source prints it:

# %% tags=["nbval-check-output"]
print(r2.report_markdown(derived), end="")

# %% [markdown]
# ## Shared pool against one local NVMe drive
#
# `ttft_p50_reduction_pct` = 100 × (local − pool) / local; `output_tok_s_gain_pct` = 100 × (pool / local − 1).

# %%
display(derived.pool_vs_local.style.hide(axis="index").format(precision=2))

# %% [markdown]
# ## Against full recompute (where recompute was measured)
#
# `ttft_p50_speedup` = recompute TTFT p50 / tier TTFT p50, at the same concurrency.

# %%
display(derived.vs_recompute.style.hide(axis="index").format(precision=2))

# %% [markdown]
# ## Headline figures, recomputed

# %% tags=["nbval-check-output"]
for name, value in r2.headline(derived).items():
    print(f"{name}: {value}")

# %% [markdown]
# ## Chart
#
# TTFT p50 (log scale) and output tok/s by concurrency, one series per tier. Recompute is a single point: it was
# measured at one concurrency only.

# %%
chart = r2.chart(derived)
display(SVG(charts.to_svg(chart)))

# %%
if out_dir:
    for path in r2.write_evidence(derived, out_dir, png_scale=chart_png_scale):
        print(f"wrote {Path(path).name}")
