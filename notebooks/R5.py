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
# # R5 — the G4 stability soak, measured on this machine
#
# Document 000's last gate, G4, is a 72-hour stability run; document 003 files its record as R5. Here the
# offload stack (real vLLM, the real LMCache server with L1 in DRAM and L2 on the pool path under a byte budget)
# serves open-loop multi-turn sessions for the configured duration while faults are injected on a schedule: the
# LMCache server and vLLM are SIGKILLed (and restarted on the same pool), the pool's file system is filled to its
# last byte, and chunk files in the pool are corrupted in place. Telemetry is sampled every few seconds
# (`kvtier.runs.soak_monitor`); the windows below are computed from the raw samples, requests and events
# (`kvtier.evidence.r5`), and G4's verdict from the windows (`kvtier.gates.g4`).

# %% tags=["parameters"]
soak_dir = "../tests/fixtures/soak"  # a soak's run directory (kvtier soak)
g4_record = "../tests/fixtures/soak/G4.json"  # G4's verdict record on it (kvtier gate-g4)
out_dir = ""  # evidence folder for the tables and chart; empty: write nothing
chart_png_scale = 2.0

# %%
import json
from pathlib import Path

from IPython.display import SVG, Markdown, display

from kvtier.evidence import charts, r5
from kvtier.gates import page, record

data = r5.load(soak_dir)
table = r5.windows(data)
faults = r5.faults_table(data)
g4 = record.read(g4_record)
config = data["run"]["config"]

# %% [markdown]
# ## Conditions

# %% tags=["nbval-check-output"]
servers = config["servers"]
load = config["workload"]
print(f"duration {config['duration_s']:g} s on the soak clock, in {len(data['run']['segments'])} segment(s); "
      f"windows of {config['window_s']:g} s, a sample every {config['sample_s']:g} s")
print(f"engine KV {servers.get('engine_kv_tokens')} tokens, LMCache L1 {servers.get('lmcache_l1_gb')} GB, pool "
      f"budget {data['run']['metadata'].get('pool_quota_gb')} GB (LMCache IsolatedLRU), build "
      f"{Path(servers.get('lmcache_build') or 'installed').name}")
print("workload: " + ", ".join(f"{k} {v}" for k, v in load.items() if v is not None))
pool_fs = data["run"]["metadata"].get("pool_fs", {})
print("pool file system: " + (f"its own, {pool_fs['size_mb']} MB {pool_fs['type']}" if pool_fs.get("own")
                              else f"the configured directory ({pool_fs.get('why_not')})"))
share = r5.monitor_share(data)
print(f"the telemetry thread used {100 * share:.2f} % of one CPU" if share is not None else "telemetry share unknown")

# %% [markdown]
# ## G4's verdict
#
# Every line with its figure and limit. A line is UNDECIDED when the soak gave too little to judge it (too few
# steady windows: a short soak with many faults), which the gate does not count as passed.

# %% tags=["nbval-check-output"]
print(f"G4 {g4['verdict']}")
lines = page.g4_table(g4)
print(lines.drop(columns="why").to_string(index=False))

# %%
display(page.styled_verdicts(lines))

# %% [markdown]
# ## The faults
#
# Each scheduled fault: when it was due and when it fired (a fault that pauses the arrivals fires when the
# requests in flight have finished), what it did, and how long until the stack served again. A corrupted chunk is
# judged by two probes sent once (their outputs are the recompute reference), stored in the pool, emptied from
# the engine and L1, and sent again: one whose chunk files were damaged in place, one left intact.

# %% tags=["nbval-check-output"]
print(faults.drop(columns="what_happened").to_string(index=False))
for row in faults.itertuples():
    print(f"{row.kind} at {row.at_s:g} s: {row.what_happened}")

# %%
wrong = [line for line in g4["lines"] if line.get("wrong_answer")]
if wrong:
    display(Markdown("\n".join(
        f'<p style="color:#c0392b;font-weight:bold">A wrong answer: {line["why"]}</p>' for line in wrong)))

# %% [markdown]
# ## Window by window
#
# Requests are counted in the window they were due; TTFT percentiles over the window's successful requests;
# where the prompt tokens came from, by vLLM's and LMCache's counters (engine prefix cache, L1, L2, recomputed);
# each server's peak anonymous RSS and open files; the pool's bytes and the free space of its file system; L2
# written and read in MB/s. `steady` windows (no fault touching them, not the first) are what drift and growth
# are judged on.

# %% tags=["nbval-check-output"]
for shown in (["window", "start_s", "requests", "ok", "failed", "ttft_p50_s", "ttft_p99_s", "output_tok_s", "faults",
               "steady"],
              ["window", "engine_frac", "l1_frac", "l2_frac", "recompute_frac", "vllm_anon_mb", "lmcache_anon_mb",
               "pool_mb", "free_mb", "l2_write_mb_s", "l2_read_mb_s"]):
    print(table[shown].to_string(index=False, float_format=lambda v: f"{v:.3g}", na_rep=""))
    print()
print("failed by cause:", json.dumps(r5.failures(data)))

# %%
display(SVG(charts.to_svg(r5.chart(data, table))))

# %%
if out_dir:
    for path in r5.write_evidence(data, out_dir, png_scale=chart_png_scale):
        print(f"wrote {Path(path).name}")
