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
# # R3 — the shared pool across instances, measured on this machine
#
# The report's R3 is one sentence: "cross-instance hot sharing verified". Here what can be shown of it is measured,
# and the verdict says which part: sharing in turn (A stops before B starts), not A serving while B reads. Two vLLM
# instances, each with its own LMCache server, share one pool directory, as two jobs (on a cluster, two scheduler
# jobs, on two nodes where it has them). Instance A (the writer) populates every session, stops, and hands off:
# the run so far and the list of chunk files it left in the pool. Instance B (the reader) starts after that, checks
# that its node sees every one of those files, and resumes every session at each concurrency. Before the first
# resume only the pool's page cache is dropped (B has never seen a session); before each later one B is evicted as
# the L2 tiers are (`runs.l2_eviction`). A window counts only when B's prompt came from LMCache L2, and A had
# stopped before B started (`kvtier.runs.cross_instance`). Readings are in the published R2
# table's shape, beside the same-instance shared pool and recompute of the same campaign, measured in the same
# rounds; figures are the median over the rounds, and every comparison carries its interval and a verdict word
# (`kvtier.evidence.measured`, item R3, and `kvtier.evidence.stats`); the sharing verdict is `kvtier.evidence.r3`'s.

# %% tags=["parameters"]
campaign_dir = "../tests/fixtures/campaign"  # a campaign's tables (R2_readings.csv, attribution.csv, ...)
out_dir = ""  # evidence folder for the tables and chart; empty: write nothing
chart_png_scale = 2.0

# %%
import textwrap
from pathlib import Path

from IPython.display import SVG, Markdown, display

from kvtier.evidence import charts, conditions, measured, r3

shared = measured.load(campaign_dir, "R3")

# %% [markdown]
# ## Conditions

# %%
display(Markdown(conditions.campaign_markdown(shared.conditions)))

# %% [markdown]
# ## Verdict

# %% tags=["nbval-check-output"]
print(textwrap.fill(r3.verdict_text(shared), width=110))

# %% [markdown]
# ## Readings: TTFT p50 (s) and output tok/s per concurrency, median over the rounds
#
# One column per concurrency. `cross_instance` is instance B resuming from the pool A wrote; `shared_pool` is
# one instance resuming from the pool it wrote itself (R2_local). An empty cell (NaN) is a window that was not
# valid in any round (see attribution).

# %% tags=["nbval-check-output"]
print(shared.table.set_index("concurrency").T.to_string(float_format=lambda v: f"{v:.4g}"))

# %% [markdown]
# ## Against the same instance, and against recompute
#
# Each comparison is taken round by round and summarised as the median ratio, its interval and one word
# (**faster**, **slower**, **no difference measured**: `kvtier.evidence.stats`). `ttft_p50_speedup` = baseline
# TTFT p50 / tier TTFT p50; `output_tok_s_ratio` = tier / baseline output tok/s.

# %% tags=["nbval-check-output"]
print(measured.verdict_text(shared.comparisons["vs_same_instance"]))

# %%
display(measured.styled(shared.comparisons["vs_same_instance"]))

# %% tags=["nbval-check-output"]
print(measured.verdict_text(shared.comparisons["vs_recompute"]))

# %%
display(measured.styled(shared.comparisons["vs_recompute"]))

# %% [markdown]
# ## Every round's readings

# %%
display(measured.rounds_table(shared).style.format(precision=4))

# %% [markdown]
# ## Attribution: instance B's prompt sources and L2 hits, and A stopped before B started
#
# From the deltas over each window of B's `vllm:prompt_tokens_by_source` and LMCache lookup-hit counters, and
# from the hand-off: `writer_stopped` is true when A's servers had stopped before B's started.

# %% tags=["nbval-check-output"]
print(shared.attribution[["round", "concurrency", "prompt_tokens", "external_kv_transfer", "l1_hit_tokens",
                          "l2_hit_tokens", "writer_stopped", "valid"]].to_string(index=False))

# %% [markdown]
# ## Correctness: instance B's greedy outputs against recompute (float32 model)

# %% tags=["nbval-check-output"]
print(shared.correctness.to_string(index=False))

# %% [markdown]
# ## Chart

# %%
display(SVG(charts.to_svg(measured.chart(shared))))

# %%
if out_dir:
    for path in measured.write_evidence(shared, out_dir, png_scale=chart_png_scale):
        print(f"wrote {Path(path).name}")
