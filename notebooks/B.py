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
# winner is decided by the ratio of TTFT (offload / engine_only) paired request by request: within a round both
# schemes serve the same seeded conversations, turns and order, so each request's TTFT on offload is divided by
# the same request's on engine_only and the round's figure is the median of those ratios (what drifts inside a
# window hits both sides of a pair); then the median over the rounds, with its interval. A crossover is located
# only between two
# measured cells, never extrapolated. Absolute seconds are this machine's; document 000's own table, from other
# hardware, is shown as context only.
#
# **Method: sequential rounds.** Every cell gets a minimum of rounds; then only the cells whose interval still
# holds 1 get one more round at a time, up to a fixed maximum or the cell's budget of seconds. Looking again and
# stopping when a cell looks decided would, with an ordinary 95 % interval at every look, decide a true tie far
# more often than one time in twenty. So the error rate is spent over the looks, fixed in advance: the look after
# k of at most N rounds may spend a(k/N) − a((k−1)/N) of a(t) = α ln(1 + (e − 1) t), the Pocock-type spending
# function of Lan & DeMets (1983, *Biometrika* 70(3)), and its interval is Student's t on the log of the per-round
# ratios at that level (Jennison & Turnbull 2000, *Group Sequential Methods*, ch. 7). The looks' levels add up to
# 5 %, so the interval a cell stops with holds the true ratio at least 95 % of the time whatever the stopping did
# (`kvtier.evidence.sequential`; `tests/test_sequential.py` checks the coverage by simulation with this machine's
# noise, and shows the naive rule failing it). A round that is an outlier by Hampel's rule (its log more than
# 3 × 1.4826 median absolute deviations from the median) is named and the interval without it shown; such a cell
# is decided only when both intervals agree. Each window's first turn of every conversation is a warm-up (its
# opening) and is not measured; the table says how many measured requests each round's p50 rests on.

# %% tags=["parameters"]
boundary_dir = "../tests/fixtures/boundary"  # a boundary run's tables (B_rounds.csv, B_attribution.csv, ...)
published_dir = "../raw_data/published"  # document 000's table (B_readings.csv) and its sources
claims = "../raw_data/published/claims.yaml"  # the claims ledger: document 000's boundary claims and statements
trace = "../raw_data/traces/mooncake_conversation_trace.jsonl"  # the workload profiled in the last section
slas = "ttft_p50_s=0.5 ttft_p99_s=2.0"  # TTFT SLAs (metric=seconds) for the regions below
out_dir = ""  # evidence folder for the tables and chart; empty: write nothing
chart_png_scale = 2.0

# %%
from pathlib import Path

import pandas as pd
from IPython.display import SVG, Markdown, display

from kvtier.audit import audit, ledger, load_tables, shapes
from kvtier.bench import profile
from kvtier.evidence import advise, boundary, charts, conditions

measured = boundary.load(boundary_dir)
sla_list = boundary.parse_slas(slas)
claims_ledger = ledger.load(claims, published_dir)

# %% [markdown]
# ## Conditions

# %%
display(Markdown(conditions.boundary_markdown(measured.conditions)))

# %% [markdown]
# ## The boundary: winner per cell, and where it changes

# %% [markdown]
# Greedy outputs first: a cell whose offload outputs differ from engine_only's, request by request, is not a
# valid measurement until explained (its row in the table below says so in `outputs`).

# %% tags=["nbval-check-output"]
differ = boundary.mismatches(measured.correctness)
print("greedy outputs: identical in every compared round" if differ.empty else differ.to_string(index=False))
print()
print(boundary.crossover_text(measured.won))
print()
print(boundary.crossover_text(measured.won, along="context_tokens"))

# %%
display(SVG(charts.to_svg(boundary.heatmap(measured.won))))

# %%
# The statistic and the interval's method are the same on every row: said once, below the table.
display(measured.won.drop(columns=["interval", "statistic"]).style.hide(axis="index").format(precision=3))

# %% [markdown]
# ## How each cell's answer was reached
#
# Per cell: the rounds it took and why they stopped (**decided**; **rounds spent** or **minutes spent**: its
# budget ran out undecided; **fixed rounds**: no sequential plan), any outlier round and the interval without it,
# and for a tie about how many more rounds would decide it at the spread observed.

# %% tags=["nbval-check-output"]
for row in measured.won.itertuples():
    line = (f"context {row.context_tokens}, concurrency {row.concurrency}: {row.winner} after {row.rounds} "
            f"round{'s' * (row.rounds != 1)} ({row.stop}), {row.ratio:.3g} [{row.ratio_low:.3g}, "
            f"{row.ratio_high:.3g}]")
    if row.requests_per_round:
        line += f", {row.requests_per_round} measured requests a round per scheme"
    if row.outlier_rounds:
        line += f"; outlier {row.outlier_rounds} (Hampel), without: {row.without_outliers}"
    if row.to_decide:
        line += f"; {row.to_decide}"
    print(line)
print()
for name in ("statistic", "interval"):
    print(f"{name}:", "; ".join(measured.won[name].unique()) if len(measured.won) else "none")

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
# ## Mismatches replayed alone
#
# After the rounds, with both stacks still up, every request whose greedy output differed between the schemes is
# sent again alone (batch of one) on each, right after that scheme's vLLM prefix cache is reset: engine_only
# recomputes the whole prompt, offload loads what LMCache still holds of it (`offload_alone_cached_tokens`) and
# computes the rest. Identical alone: the difference came from serving it in a batch (vLLM's CPU kernels are not
# batch-invariant), not from the KV. Still different alone: the KV offload loaded gives another answer than
# recomputing it, and the cell stays "not a valid measurement". `boundary.replay_controls` requests whose outputs
# matched are replayed the same way (`why` = control), as a check of the method (`kvtier.runs.boundary_replay`).

# %% tags=["nbval-check-output"]
if measured.replays.empty:
    print("no request was replayed (no mismatch, and no control configured or recorded in this run)")
else:
    print(measured.replays.to_string(index=False))

# %% [markdown]
# ## Document 000's statements, against this map (shape only)
#
# Document 000 states where its boundary lies: the engine ("VRAM scheme") wins at low concurrency and short
# context, offload at high concurrency or long context, and offload may be no better, or worse, at the low
# corner. Its bounds (8, 16, 32K) and seconds come from a 480B model on other hardware, so only the *shape* is
# checked here (`kvtier.audit.shapes`, the ledger's `boundary_statements`): along each line of this grid, does the
# winner change from the engine to offload as the axis rises (AGREES), the other way (CONTRADICTS), both (MIXED),
# or not at all (NOT SHOWN)? The same check runs from the command line: `kvtier audit --boundary DIR`.

# %% tags=["nbval-check-output"]
statements = shapes.evaluate_all(claims_ledger.boundary_statements, measured.grid)
print(shapes.text(statements))

# %% [markdown]
# ## Document 000's own table, as context
#
# Document 000 prints one table of the boundary (TTFT of the VRAM and offload schemes by concurrency, context not
# stated, other hardware). The claims audit (evidence item A) gives each of its cells a verdict against the
# readings it cites; those verdicts are repeated here. Only the table's shape can be set beside the map above,
# never its seconds.

# %% tags=["nbval-check-output"]
published = pd.read_csv(Path(published_dir) / "B_readings.csv")
print(published.to_string(index=False))
winner = ["offload" if o < v else "engine_only" for v, o in zip(published["vram_ttft_s"], published["offload_ttft_s"])]
print("published winner by concurrency:", dict(zip(published["concurrency"], winner)))
table_claims = [r for r in audit(claims_ledger, load_tables(published_dir)) if r.claim.group == "000-boundary-table"]
for r in table_claims:
    print(f"{r.claim.id}: {r.verdict} (claimed {r.claim.claimed})")

# %% [markdown]
# ## A workload on this map: the bundled conversation trace
#
# Document 000's method starts from the workload: its context lengths and its concurrency peak. The bundled
# Mooncake conversation trace has arrival times but no end times, so its concurrency is modelled: each request
# holds a slot for its prefill and its decode at *this machine's* rates, read off this grid's own engine_only
# cell where the engine recomputed everything (stated below). Its operating points (the concurrency peak at the
# context p50, p90 and p99) are then read off the map for each SLA; a point the measured cells do not bracket is
# answered "outside the measured grid", never extrapolated. The same answer comes from the command line, with
# the rates printed below: `kvtier workload profile TRACE --prefill-tok-s R --time-per-output-token-s T --out
# profile.json`, then `kvtier advise --sla-ttft-p50 S --profile profile.json --boundary DIR`.

# %% tags=["nbval-check-output"]
service, service_source = advise.service_model(measured)
print(service_source)
workload = profile.profile(profile.load(trace), service, source=Path(trace).name)
print(profile.text(workload))
print()
print(advise.text(advise.advise(measured.grid, workload, sla_list)))

# %%
if out_dir:
    for path in boundary.write_evidence(measured, out_dir, sla_list, png_scale=chart_png_scale,
                                        statements=statements):
        print(f"wrote {Path(path).name}")
