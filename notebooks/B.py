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
# # B — engine memory or offload: where the boundary lies, measured on this machine
#
# Document 000 asks one question: keep the KV cache in accelerator memory (the "VRAM scheme") or offload it?
# Its answer is a boundary set by concurrency, context length and the TTFT SLA. Here both schemes ran on one
# server configuration (`kvtier.runs.boundary`), started side by side and measured cell by cell in alternating
# order, round after round:
#
# - **engine_only**: vLLM with its prefix cache in a fixed KV capacity, no connector: a conversation the engine
#   has evicted is recomputed;
# - **offload**: the same vLLM with the LMCache MP server (L1 in DRAM, L2 on the local disk): it is reloaded.
#
# Each cell (context × concurrency c) serves multi-turn conversations closed loop at c, each returning after the
# others' turns (round-robin). Nothing is reset inside a cell: whether a returning prefix is still in the engine
# follows from its capacity and its own LRU, and the attribution below shows which source served it. A cell's
# winner is decided by the ratio of TTFT p50 (offload / engine_only) paired by round, with its interval
# (`kvtier.evidence.stats`); a crossover is located only between two measured cells, never extrapolated.
# Absolute seconds are this machine's; document 000's own table, from other hardware, is shown as context only.

# %% tags=["parameters"]
boundary_dir = "../tests/fixtures/boundary"  # a boundary run's tables (B_rounds.csv, B_attribution.csv, ...)
published_dir = "../raw_data/published"  # document 000's table (B_readings.csv) and the claims ledger
slas = [["ttft_p50_s", 0.5], ["ttft_p99_s", 2.0]]  # TTFT SLAs (metric, seconds) for the regions below
out_dir = ""  # evidence folder for the tables and chart; empty: write nothing
chart_png_scale = 2.0

# %%
from pathlib import Path

import pandas as pd
from IPython.display import SVG, Markdown, display

from kvtier.evidence import boundary, charts, conditions

measured = boundary.load(boundary_dir)
sla_list = [(metric, float(seconds)) for metric, seconds in slas]

# %% [markdown]
# ## Conditions

# %%
display(Markdown(conditions.boundary_markdown(measured.conditions)))

# %% [markdown]
# ## The boundary: winner per cell, and where it changes

# %% tags=["nbval-check-output"]
print(boundary.crossover_text(measured.won))

# %%
display(SVG(charts.to_svg(boundary.heatmap(measured.won))))

# %%
display(measured.won.style.hide(axis="index").format(precision=3))

# %% [markdown]
# ## Why a cell went one way: where each scheme's prompt tokens came from
#
# Median over the rounds of the share of prompt tokens served by the engine's prefix cache, LMCache L1, LMCache
# L2, or computed again (from the deltas of vLLM's `prompt_tokens_by_source` and LMCache's lookup-hit counters
# over the cell). When the conversations outgrow the engine, engine_only's recompute share rises; offload serves
# the same prefixes from L1/L2.

# %% tags=["nbval-check-output"]
shares = boundary.attribution_medians(measured.attribution)
print(shares.to_string(index=False, float_format=lambda v: f"{v:.2f}"))

# %% [markdown]
# ## TTFT SLA regions
#
# For each SLA, each cell and each scheme: **MET** when the scheme's interval over the rounds lies at or under the
# SLA, **NOT MET** when it lies above, **UNDECIDED** otherwise.

# %% tags=["nbval-check-output"]
regions = boundary.sla_regions(measured.grid, sla_list)
wide = regions.pivot_table(index=["metric", "sla_s", "context_tokens", "concurrency"], columns="scheme",
                           values="verdict", aggfunc="first")
print(wide.to_string())

# %% [markdown]
# ## Every cell's readings, median over the rounds

# %%
display(boundary.cell_medians(measured.grid).style.hide(axis="index").format(precision=4))

# %% [markdown]
# ## Correctness: greedy outputs of offload against engine_only, request by request (float32 model)

# %% tags=["nbval-check-output"]
print(measured.correctness.to_string(index=False))

# %% [markdown]
# ## Document 000's own table, as context
#
# Document 000 prints one table of the boundary (TTFT of the VRAM and offload schemes by concurrency, context not
# stated, other hardware); the claims audit (evidence item A) checks it against the report it cites. Only its
# shape can be set beside the map above — where the winner changes and in which direction — never its seconds.

# %% tags=["nbval-check-output"]
published = pd.read_csv(Path(published_dir) / "B_readings.csv")
print(published.to_string(index=False))
winner = ["offload" if o < v else "engine_only" for v, o in zip(published["vram_ttft_s"], published["offload_ttft_s"])]
print("published winner by concurrency:", dict(zip(published["concurrency"], winner)))

# %%
if out_dir:
    for path in boundary.write_evidence(measured, out_dir, sla_list, png_scale=chart_png_scale):
        print(f"wrote {Path(path).name}")
