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
# # R9 — model-weight load time per tier path, measured on this machine
#
# Document 000 says model loading was sped up "6.2–9.3×" on Huawei Atlas 910B (report R9), without saying
# against what. Here the same question is measured on what can be measured: one model's weights, copied to each
# tier path, loaded by real vLLM, **cold** (the copy dropped from the page cache first) and **warm** (just read),
# beside the **raw read** of the same weight files (the floor: reading them whole, one after another). Each case
# records vLLM's own "Loading weights took N seconds" and the time from launch to a server that answers; the
# paths are taken in alternating order, repeated (`kvtier.runs.r9`). Figures are medians over the repetitions;
# every comparison is paired by repetition, with its interval and a word (`kvtier.evidence.r9`, `stats`).

# %% tags=["parameters"]
r9_dir = "../tests/fixtures/r9"  # an R9 run (loads.jsonl, run.json)
claims = "../raw_data/published/claims.yaml"  # the claims ledger (document 000's R9 figure)
out_dir = ""  # evidence folder for the tables and chart; empty: write nothing
chart_png_scale = 2.0

# %%
from pathlib import Path

from IPython.display import SVG, Markdown, display

from kvtier.audit import ledger
from kvtier.evidence import charts, r9

measured = r9.load(r9_dir)
settings = measured.run["settings"]

# %% [markdown]
# ## Conditions

# %% tags=["nbval-check-output"]
print(f"weights: {measured.run['weights_bytes'] / 2**20:.1f} MiB, dtype {settings['dtype']}, vLLM platform "
      f"{settings['platform']}; {settings['repetitions']} repetition(s) per path and state; paths "
      + ", ".join(sorted(settings["paths"])))
print(f"starts: {r9.starts(measured.loads)}")

# %% [markdown]
# ## Readings (median over the repetitions)
#
# `loading_weights_s` is vLLM's own figure; `ready_s` the time from launch to a server that answers (start-up
# included; vLLM's import too where the starts were whole: see "starts" above); `raw_read_s` reading the weight files whole (`raw_read_gb_s` its bandwidth); `resident_before_mib`
# how much of the copy was in the page cache when vLLM started (0 for cold, all of it for warm).

# %% tags=["nbval-check-output"]
print(measured.table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))

# %%
display(SVG(charts.to_svg(r9.chart(measured))))

# %% [markdown]
# ## Were the cold reads cold?
#
# Before each cold raw read the copy is dropped from this machine's page cache and what stayed resident is counted
# (`resident_before_mib`, with `mincore`). On an emulated device (kvtier.stack.emulated) the kernel caps every read
# of the path, so a cold read cannot beat the cap by more than its 15 % tolerance: one that does was served from a
# cache, and reads **faster than the cap: not cold**. On a path as it is there is no cap to judge by; here the tier
# paths are on a virtual disk, and a cold read with nothing resident can still come faster than fio's direct reads
# of the same path (G2): from the hypervisor's cache of the disk image, below anything this machine can drop, or
# from readahead issuing larger and more concurrent requests than fio's. Only an emulated path can tell.

# %% tags=["nbval-check-output"]
cold = r9.cold_reads(measured)
for row in cold.itertuples():
    cap = f"cap {row.cap_mb_s:.4g} MB/s" if row.cap_mb_s else "not emulated"
    resident = "not recorded" if row.resident_before_mib != row.resident_before_mib else f"{row.resident_before_mib:.1f} MiB"
    print(f"{row.path}: {row.cold_reads} cold reads, fastest {row.fastest_mb_s:.4g} MB/s, median "
          f"{row.median_mb_s:.4g} MB/s ({cap}; resident before at most {resident}): {row.verdict}")

# %% [markdown]
# ## Comparisons
#
# A ratio above 1: the first case took longer, by that factor (**longer**, **shorter**, **no difference
# measured**). "shared_pool / local_disk" is the pool against the local disk; "cold / warm" what reading from the
# device adds to a load; "vLLM's load / raw read" how far above the floor vLLM loads.

# %% tags=["nbval-check-output"]
for row in measured.comparisons.itertuples():
    interval = f"[{row.low:.3g}, {row.high:.3g}]" if row.rounds > 1 else "(one repetition)"
    print(f"{row.comparison} ({row.reading}): {row.point:.3g} {interval}: {row.word}")

# %% [markdown]
# ## The published figure, as context

# %%
[claim] = [c for c in ledger.load(claims).claims if c.id == "000-r9-weight-load-speedup"]
display(Markdown(f"> {claim.quote}\n\nClaimed: {claim.claimed[0]}–{claim.claimed[1]}× on Atlas 910B. The "
                 "document names no baseline (which storage, cold or warm) and no model, so no figure here can "
                 "confirm or refute it; the page shows what the ratio is on this machine for each baseline that "
                 "can be measured."))

# %%
if out_dir:
    for path in r9.write_evidence(measured, out_dir, png_scale=chart_png_scale):
        print(f"wrote {Path(path).name}")
