# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # R1 — the parallel-read patch and checkpoint saves, measured on this machine
#
# The report's R1: an LMCache parallel-read patch raised one worker's cold-read bandwidth from 0.98 to 5.23 GB/s,
# and a checkpoint save of an 8-GPU 32B LoRA run went from 3.26 to 6.40 GB/s. Here the same questions are asked of
# this machine, in one run:
#
# - **Cold reads.** One LMCache fs L2 worker (MP mode's `FSL2Adapter`) loads N chunk files from the pool directory,
#   as the upstream 0.5.6 release (one key after another) and as kvtier's patched build (bounded concurrent loads,
#   `patches/`) at each load bound, in alternating order from round to round. The adapter reads with O_DIRECT
#   (its `use_odirect`, kvtier's `lmcache.use_odirect`) or through the page cache, as the conditions below say;
#   either way the files are dropped from the page cache with `posix_fadvise(DONTNEED)` right before each load,
#   and the bytes still resident are counted with `mincore`. Beside them, fio reads a file of the same size in the
#   same directory with O_DIRECT (libaio) at each queue depth: the device limit, set beside the patched worker at
#   the matching load bound.
# - **Checkpoint saves.** A LoRA-sized adapter state dict, in safetensors shards, saved with fsync to the local
#   disk and to the pool path, by one writer (shard after shard) and by parallel writers (one per shard).
# - **Resume.** Sessions of 12k tokens resumed from L2 (a local_disk tier run at concurrency 1, every resume
#   reading its chunks cold), against the time to read those chunk files whole, cold, one after another; and the
#   same sessions resumed with their KV already in vLLM's own prefix cache (an engine tier run): the floor of
#   request handling and forward pass that no storage tier can remove.
#
# Every figure is the median over the run's rounds, every ratio is between figures of this run, and all are
# computed by `kvtier.evidence.r1` from the raw records of `kvtier.runs.r1`. R1 reads the tier paths as they are,
# never through emulated devices (config `emulation`): under a bandwidth cap every build and fio would read at the
# cap, and neither the patch nor the checksum's cost could show.

# %% tags=["parameters"]
r1_dir = "../tests/fixtures/r1"  # an R1 directory: reads/ (kvtier r1-reads) and resume/ (kvtier r1-resume)
published_dir = "../raw_data/published"  # the report's claims ledger (claims.yaml), for context
out_dir = ""  # evidence folder for the tables and chart; empty: write nothing
chart_png_scale = 2.0

# %%
from pathlib import Path

from IPython.display import SVG, Markdown, display

from kvtier.audit import ledger
from kvtier.evidence import charts, r1

measured = r1.load(r1_dir)

# %% [markdown]
# ## Conditions

# %%
display(Markdown(r1.conditions_markdown(measured.conditions)))

# %% [markdown]
# ## Targets
#
# Patched (at its best load bound) ≥ 0.8 × fio at its best queue depth, and ≥ 2 × upstream on a device that
# rewards parallel reads (fio's best depth ≥ 1.5 × depth 1); on a device that does not, patched ≥ upstream. The
# configured bound (`lmcache.load_concurrency`, what the tier runs use) ≥ 0.8 × fio at that depth. A resume from L2
# within 2 × the raw read time of its chunk files.
#
# Each figure is the median of per-round ratios (both sides read in the same round, in alternating order), shown
# with its interval (`kvtier.evidence.stats`; the resume's from the sessions' TTFTs and the raw-read rounds). A
# target is **MET** only when the whole interval clears it, **NOT MET** when the whole interval misses it, and
# **UNDECIDED** otherwise.
#
# **Sequential rounds** (when the run's `max_rounds` is above its `rounds`; the conditions above say): after the
# first rounds, the reads go on one round at a time, each measuring only what a target still undecided needs (e.g.
# for the checksum's cost, the patched build's loads at the configured bound, checked and not), until every read
# target is decided, `max_rounds` is reached or the run has taken `budget_s`. Looking again after each round and
# stopping when decided would inflate a fixed 95 % interval's error; the error rate is instead spent over the looks
# (Lan & DeMets 1983, *Biometrika* 70(3), Pocock-type spending function; Jennison & Turnbull 2000, ch. 7), each
# look a Student's t interval on the log of the per-round ratios at its share of the level, so the interval a
# target stops with holds the truth at least 95 % of the time whatever the stopping did
# (`kvtier.evidence.sequential`, its coverage simulated in `tests/test_sequential.py`). A round that is an outlier by
# Hampel's rule (its log more than 3 scaled MADs from the median) is named, and the target is decided only when the
# interval without it agrees. Each line says how many rounds it took and why it stopped; an undecided one, about
# how many more rounds would decide it at the spread observed.

# %% tags=["nbval-check-output"]
print(r1.targets_text(measured))

# %% [markdown]
# ## Cold reads: one LMCache worker per build and load bound, and fio per queue depth (GB/s)
#
# `resident_bytes_before_max` is the most of the chunk files found in the page cache right before a timed load
# (0: every load read the device). The upstream adapter ignores the bound: it reads one key after another.

# %% tags=["nbval-check-output"]
print(measured.coldread.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
print()
print(measured.fio.to_string(index=False, float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# The patched worker at each load bound beside fio at the same queue depth: the medians, and `patched_over_fio`,
# the median of the per-round ratios with its interval (`low`, `high`) over `rounds` rounds:

# %% tags=["nbval-check-output"]
print(measured.matching.to_string(index=False, float_format=lambda v: f"{v:.3f}"))

# %%
display(SVG(charts.to_svg(charts.r1_chart(measured.coldread, measured.fio))))

# %% [markdown]
# Every round, for the spread behind the medians:

# %%
display(measured.coldread_rounds[["round", "build", "load_concurrency", "seconds", "gb_per_s",
                                  "resident_bytes_before"]]
        .style.hide(axis="index").format(precision=3))

# %% [markdown]
# ## Checkpoint saves (GB/s, fsync included)

# %% tags=["nbval-check-output"]
print(measured.checkpoint.to_string(index=False, float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# ## Resume of long sessions from L2
#
# Per session: TTFT of the resume (client side, streaming), the raw read time of its chunk files (the pool's
# files read whole and cold, divided equally among the sessions), the TTFT of the same session resumed from vLLM's
# prefix cache (`engine_hit_ttft_s`, no storage involved) and what the L2 resume costs beyond it, in raw reads
# (`beyond_engine_hit_over_raw_read`), and LMCache's own timings from its log: the L2 prefetch, and the retrieve
# into the engine. `window_l2_hit_tokens` is LMCache's L2 hit count over the window. The first resume after the
# servers' restart (the eviction) is the slowest: LMCache's L1 pages and reader threads are new.

# %% tags=["nbval-check-output"]
if measured.resume is None:
    print("no resume run in this R1 directory")
else:
    print(measured.resume.drop(columns=["request_id"]).to_string(index=False, float_format=lambda v: f"{v:.4f}"))

# %% [markdown]
# ## The published figures, as context
#
# Measured on an AMD MI308X node with a 4-disk RAID0 flash pool over 100 GbE, of a 480B model and a 32B LoRA run:
# not the same device, model or chunk size as here, so they are shown beside, not compared.

# %%
display(r1.published_context(ledger.load(Path(published_dir) / "claims.yaml")).style.hide(axis="index"))

# %%
if out_dir:
    for path in r1.write_evidence(measured, out_dir, png_scale=chart_png_scale):
        print(f"wrote {Path(path).name}")
