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
# # R2_local — tiered cold resume, measured on this machine
#
# The published R2 table's shape (TTFT p50 and output tok/s per tier × concurrency), measured here with real
# vLLM and the real LMCache server by the tier runs of the pipeline (`raw_data/runs/<campaign>/`). Each tier ran
# the cold-resume protocol: populate, evict as the tier requires, resume at each concurrency (recompute keeps no
# KV, so its populate is a one-session warm-up). A window counts
# only when its attribution shows that the prefix came from the tier under test; an invalid window is shown in
# the attribution table and left out of the readings. Every tier ran once per round, in an order rotated from
# round to round; readings are the median over the rounds, and each comparison is taken round by round and given
# its interval and a verdict word (`kvtier.evidence.measured`, item R2_local, and `kvtier.evidence.stats`). Absolute
# figures here are for this machine and model; only ratios may be set beside the published ones.

# %% tags=["parameters"]
campaign_dir = "../tests/fixtures/campaign"  # a campaign's tables (R2_readings.csv, attribution.csv, ...)
published_readings = "../raw_data/published/R2_readings.csv"  # the published R2 table (the comparison in scale)
sweep_dir = ""  # a bandwidth sweep run (evidence S): its model predicts the comparison in scale; empty: none
out_dir = ""  # evidence folder for the tables and chart; empty: write nothing
chart_png_scale = 2.0

# %%
from pathlib import Path

import pandas as pd
from IPython.display import SVG, Markdown, display

from kvtier.evidence import charts, conditions, measured, scaled

local = measured.load(campaign_dir, "R2_local")
caps = scaled.emulated_caps(local)

# %% [markdown]
# ## Conditions

# %%
display(Markdown(conditions.campaign_markdown(local.conditions)))

# %% [markdown]
# ## Readings: TTFT p50 (s) and output tok/s per tier × concurrency, median over the rounds
#
# One column per concurrency. An empty cell (NaN) is a window that was not valid in any round (see attribution)
# or a tier that was not run. Every round's own readings follow the comparisons.

# %% tags=["nbval-check-output"]
print(local.table.set_index("concurrency").T.to_string(float_format=lambda v: f"{v:.4g}"))

# %% [markdown]
# ## How a comparison is decided
#
# Both sides of a comparison are measured in every round, so each round gives its own ratio; a drift of the
# machine during a round hits both sides. The figure is the median of the per-round ratios, with an interval
# (`kvtier.evidence.stats`, always 95 %: Student's t on the log of the ratios below 6 rounds, min–max of the rounds
# at 6 and 7, a seeded bootstrap from 8) and one word: **faster** when the whole interval lies above 1, **slower**
# when it lies below, **no difference measured** when it holds 1. `ttft_p50_speedup` = baseline TTFT p50 / tier
# TTFT p50; `output_tok_s_ratio` = tier / baseline output tok/s.

# %% [markdown]
# ## Every tier against recompute

# %% tags=["nbval-check-output"]
print(measured.verdict_text(local.comparisons["vs_recompute"]))

# %%
display(measured.styled(local.comparisons["vs_recompute"]))

# %% [markdown]
# ## Shared pool against local disk

# %% tags=["nbval-check-output"]
print(measured.verdict_text(local.comparisons["pool_vs_local_disk"]))

# %%
display(measured.styled(local.comparisons["pool_vs_local_disk"]))

# %% [markdown]
# ## The published comparison in scale
#
# Where both L2 tiers ran on emulated devices (kvtier.stack.emulated), their read caps keep the published
# hardware's ratio (config `emulation`: one 100 GbE pool port, 12.5 GB/s line rate, against one PCIe Gen4 NVMe,
# about 7 GB/s sequential read), scaled down to this machine. The published table's pool-against-local-NVMe TTFT
# p50 reduction and tok/s gain stand beside the measured ones, per concurrency, with a verdict
# (`kvtier.evidence.scaled`): **REPRODUCED IN SCALE** when the measured reduction's interval lies above 0 and holds
# the published reduction, **NOT REPRODUCED** when it lies wholly on one side of it, **UNDECIDED** when it holds both
# the published reduction and 0. The scale column sets the local disk's TTFT against recompute here beside the
# published one (17.31 s / 149.48 s at concurrency 16): where this engine's own resume from DRAM already takes more
# of a recompute than that, no cap can reach the published scale, and the floor dilutes every reduction. Where a
# bandwidth sweep ran, its service model predicts the reduction at the caps in force (the floor: this campaign's
# DRAM resume at the same concurrency) and at other pool-to-local bandwidth ratios.

# %% tags=["nbval-check-output"]
if caps is None:
    print("not emulated here: local_disk and shared_pool were not both on emulated devices, so the published "
          "comparison cannot be rerun in scale (the reading above compares the two paths as they are)")
else:
    print(f"read caps in force: local_disk {caps['local_disk'] / 1e6:g} MB/s, shared_pool "
          f"{caps['shared_pool'] / 1e6:g} MB/s (ratio {caps['shared_pool'] / caps['local_disk']:.3g}; "
          f"published hardware 12.5 / 7 = {12.5 / 7:.3g})")
    in_scale = scaled.compare(local, scaled.published_comparison(published_readings))
    for _, row in in_scale.iterrows():
        scale = ("" if row["local_vs_recompute"] is None or pd.isna(row["published_local_vs_recompute"]) else
                 f"; local/recompute {row['local_vs_recompute']:.3g} here, {row['published_local_vs_recompute']:.3g}"
                 " published")
        print(f"concurrency {row['concurrency']}: TTFT p50 reduction {row['measured_ttft_reduction_pct']:.1f} % "
              f"[{row['measured_low_pct']:.1f}, {row['measured_high_pct']:.1f}] against published "
              f"{row['published_ttft_reduction_pct']:.1f} %: {row['verdict']}; tok/s gain "
              f"{row['measured_tok_gain_pct']:+.1f} % (published {row['published_tok_gain_pct']:+.1f} %){scale}")

# %%
if caps is not None and sweep_dir:
    from kvtier.evidence import sweep
    swept = sweep.analyse(sweep_dir)
    if swept.model is None:
        print(f"the sweep's model could not be fitted: {swept.model_note}")
    else:
        expected = scaled.predicted(swept.model, local, caps["local_disk"], caps["shared_pool"],
                                    local.conditions["workload"]["context_tokens"])
        print(f"the sweep's model ({swept.model_note}), fitted at concurrency "
              f"{', '.join(map(str, sorted(set(swept.rows['concurrency']))))}: predicted TTFT p50 reduction of the "
              "pool against the local disk, at the caps in force and with the pool at other ratios of the local "
              "disk's cap")
        display(expected.style.hide(axis="index").format(precision=3))
        for row in scaled.published_scale(swept.model, local, scaled.published_comparison(published_readings),
                                          local.conditions["workload"]["context_tokens"]).itertuples():
            reach = (f"the model reaches it with the local disk capped at {row.local_cap_for_it_mb_s:.4g} MB/s"
                     if row.local_cap_for_it_mb_s is not None else
                     f"no cap reaches it here: this engine's resume from DRAM alone takes {row.floor_vs_recompute:.3g} "
                     "of a recompute")
            print(f"the published scale at concurrency {row.concurrency}: local NVMe at "
                  f"{row.published_local_vs_recompute:.3g} of recompute; {reach}")

# %% [markdown]
# ## Every round's readings
#
# The raw material of the medians and intervals above: TTFT p50 (s) and output tok/s of every valid window,
# by round (`R2_rounds.csv` of the campaign).

# %%
display(measured.rounds_table(local).style.format(precision=4))

# %% [markdown]
# ## Attribution: which source served each window's prompt
#
# From the deltas of vLLM's `prompt_tokens_by_source` and LMCache's L1/L2 lookup-hit counters over the window.

# %% tags=["nbval-check-output"]
print(local.attribution[["tier", "concurrency", "valid", "rule"]].to_string(index=False))

# %%
display(local.attribution.dropna(axis=1, how="all").style.hide(axis="index").format(precision=0))

# %% [markdown]
# ## Correctness: greedy outputs of every resume against recompute (float32 model)

# %% tags=["nbval-check-output"]
print(local.correctness.to_string(index=False))

# %% [markdown]
# ## Chart

# %%
display(SVG(charts.to_svg(measured.chart(local))))

# %%
if out_dir:
    for path in measured.write_evidence(local, out_dir, png_scale=chart_png_scale):
        print(f"wrote {Path(path).name}")
