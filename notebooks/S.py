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
# # S — at which tier bandwidth does offload stop paying? A bandwidth sweep on emulated tiers, measured here
#
# Both documents rest on a claim about storage bandwidth: a faster pool beats local NVMe on cold resume, and
# offload beats recomputing the context. Which bandwidth is "fast enough" depends on the context, the concurrency
# and how fast the engine prefills. Here the L2 tier is a device of known bandwidth: an ext4 image on a loop
# device whose read rate the kernel caps for every process of the run (`kvtier.stack.emulated`). The same
# sessions are populated once per context, then resumed cold from L2 (the engine's prefix cache and LMCache's L1
# emptied, the pool's files dropped from the page cache) at each read cap, rewritten between runs without
# restarting the servers; recompute (every token prefilled) and DRAM (LMCache's L1) are measured in the same
# rounds, in an order that rotates from round to round (`kvtier.runs.sweep`). Each comparison is a ratio per
# round, with its interval and a verdict (`kvtier.evidence.sweep`, `sequential`). What is not emulated: a
# network's latency (a loop device answers in microseconds), and, under cgroup v1, buffered writeback.

# %% tags=["parameters"]
sweep_dir = "../tests/fixtures/sweep"  # a sweep run (run.json, sweep.jsonl)
out_dir = ""  # evidence folder for the tables and chart; empty: write nothing
chart_png_scale = 2.0

# %%
from pathlib import Path

from IPython.display import SVG, display

from kvtier.evidence import charts, sweep

measured = sweep.analyse(sweep_dir)
spec = measured.run["sweep"]

# %% [markdown]
# ## Conditions

# %% tags=["nbval-check-output"]
tier = measured.run["emulation"]["tiers"]["local_disk"]
print(f"L2 on {tier['device']} ({tier['size_bytes'] >> 20} MiB ext4 image, cgroup v"
      f"{measured.run['emulation']['cgroup_version']}); read caps "
      + ", ".join(f"{bps / 1e6:g}" for bps in measured.run["caps_bps"]) + " MB/s; write cap "
      f"{tier['configured']['write_bps'] / 1e6:g} MB/s")
print(f"contexts {spec['contexts']} tokens x concurrency {spec['concurrency']}, {spec['sessions']} sessions a "
      f"context, {spec['rounds']} round(s); {measured.run['kv_bytes_per_token']} bytes of KV a token")
print(f"{len(measured.rows)} windows, {int(measured.rows['requests'].sum())} resumes measured, "
      f"{int(measured.rows['failed'].sum())} failed")

# %% [markdown]
# ## Resume TTFT by read cap
#
# Each point is the median over the rounds of a window's TTFT p50 (`sessions` resumes a window); the dashed rules
# are recompute and DRAM at the same context.

# %%
display(SVG(charts.to_svg(sweep.chart(measured))))

# %% [markdown]
# ## Each cap against recompute and against DRAM
#
# `vs_recompute` below 1: the resume from L2 at that cap was faster than recomputing the context (**offload
# pays** when the whole interval is below 1, **recompute faster** when it is above, **undecided** otherwise).
# `vs_dram`: how many times slower than a resume from host memory.

# %%
display(measured.comparisons.style.hide(axis="index").format(precision=3))

# %% [markdown]
# ## Where offload starts to pay
#
# Bracketed between two measured caps, never interpolated: the highest cap at which recompute was decided faster
# and the lowest at which offload was.

# %% tags=["nbval-check-output"]
for row in measured.crossovers.itertuples():
    print(f"{row.context_tokens} tokens, concurrency {row.concurrency}: {row.crossover}")

# %% [markdown]
# ## A model that predicts the sweep
#
# TTFT p50 = DRAM's TTFT at the same context (the floor, measured) + a fixed cost of going to L2 at all + a share s
# of max(0, concurrency × context × KV bytes a token / read cap − a head start): the time the device takes to read
# the KV in flight, of which the median request waits for part, less what the device lets through before the cap
# binds (the block throttle admits a slice's worth of bytes at once; loads overlap the engine's work). Its three
# parameters are fitted (least squares of the relative residuals) on the first and last contexts at every other
# cap, and judged on every other cell, which it never saw; a cap outside the fitted range is marked extrapolated.

# %% tags=["nbval-check-output"]
print(measured.model_note)
if measured.model is not None:
    m = measured.model
    print(f"L2 overhead {m.l2_overhead_s * 1e3:.0f} ms, share s = {m.share:.2f}, head start "
          f"{m.head_start_s:.3f} s; fitted on caps {m.caps_fitted[0] / 1e6:g}-{m.caps_fitted[1] / 1e6:g} MB/s")

# %%
if measured.model is not None:
    display(measured.predictions.style.hide(axis="index").format(precision=3))

# %%
if out_dir:
    for path in sweep.write_evidence(measured, out_dir, png_scale=chart_png_scale):
        print(f"wrote {Path(path).name}")
