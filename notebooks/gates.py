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
# # The gated joint test, G1 to G4, on this run
#
# Document 000 describes the method behind the report's numbers as a gated joint test: **G1** arrival
# acceptance (the platform is what was ordered), **G2** single-node baseline (what the storage and the engine
# deliver before any KV is put on them, and whether that is repeatable), **G3** the main gate (the candidate tier
# against the baseline: TTFT reduction ≥ 25 % and a throughput gain), **G4** a 72-hour stability soak. A failed
# gate stops the test. Here each gate is a pipeline stage: G1 runs before anything is measured (every
# measurement needs its PASS), G2 and G3 judge what the run measured, and G4 a soak of the offload stack with
# faults injected, after them (its duration is the config's: minutes here, the published 72 hours on a cluster).
# Each writes a verdict record (JSON, `workflow/schemas/gate.schema.yaml`); a FAIL stops the pipeline with the
# gate's failed lines, unless the config says `gates.stop_on_fail: false`, when every page rendered after it says
# so at its top. G3 is UNDECIDED when no line missed its threshold but an interval straddles one (the rounds could
# not tell): the run goes on, and the soak's page says so at its top, unless `gates.stop_on_undecided` is true.
# The lines are computed by `kvtier.gates` (`bom`, `g2`, `g3`, `g4`); this page only shows the records.

# %% tags=["parameters"]
gates_dir = "../tests/fixtures/gates"  # a run's gate records (G1.json ... G4.json, platform.json)
out_dir = ""  # evidence folder for gate_lines.csv; empty: write nothing

# %%
from pathlib import Path

from IPython.display import Markdown, display

from kvtier.gates import page

records = page.load(gates_dir)

# %% [markdown]
# ## The gates, in order
#
# Each gate's own page: G1 is [R6](../R6/R6.html) (its platform record, beside every run's, is
# [R4](../R4/R4.html)); G2 is [R7](../R7/R7.html), which reuses R1's fio rounds ([R1](../R1/R1.html)) and the
# campaign's rounds ([R2_local](../R2_local/R2_local.html)), which G3 judges too; G4 is the soak,
# [R5](../R5/R5.html), with its windows and faults.

# %% tags=["nbval-check-output"]
print(page.summary(records).to_string(index=False))

# %%
display(page.styled_verdicts(page.summary(records)))

# %% [markdown]
# ## G1 — arrival acceptance (evidence R6)
#
# The bill of materials (`gates.g1.expect`) against the platform record the pipeline took before measuring:
# each line a field of the record, an operator and the expected value, with what was found. A field the record
# leaves empty fails as "not recorded".

# %% tags=["nbval-check-output"]
print(f"G1 {records['G1']['verdict']}: platform record {records['G1']['inputs'][0]['path']}")
print(page.g1_table(records["G1"]).drop(columns="why").to_string(index=False))
for note in records["G1"].get("notes", []):  # e.g. whether the tiers are emulated here, and why not
    print(note)

# %%
display(page.styled_verdicts(page.g1_table(records["G1"])))

# %% [markdown]
# ## G2 — single-node baseline (evidence R7)
#
# What each tier path delivers before any KV is put on it (fio, direct I/O, median over the repetitions; the pool
# path's sequential reads are R1's fio rounds of the same run), then every baseline line: stable when the
# repetitions' coefficient of variation is at most the bound, and over (a time: under) its floor when one is
# configured. The engine lines are the campaign's recompute TTFT (every token prefilled) and its engine-hit TTFT
# (the KV already in vLLM's prefix cache: the floor no storage tier can go under).

# %% tags=["nbval-check-output"]
if "G2" in records:
    print(page.deliverable(records["G2"]).to_string(float_format=lambda v: f"{v:.4g}", na_rep=""))
else:
    print("G2 was not run (G1 did not pass)")

# %%
if "G2" in records:
    display(page.styled_verdicts(page.g2_lines(records["G2"])))

# %% [markdown]
# ## G3 — the main gate
#
# TTFT p50 reduction and output tok/s gain of the candidate tier against the baseline, per concurrency, from the
# per-round ratios of the campaign's interleaved rounds (median and interval: `kvtier.evidence.stats`). A line is
# MET only when its whole interval clears the threshold; an UNDECIDED line is not a pass. Below them, per tier
# compared (other than recompute), whether its greedy outputs were recompute's, request by request, in every round:
# a tier whose outputs differ is not a valid measurement until explained, so its line is UNDECIDED and the gate
# does not pass.

# %% tags=["nbval-check-output"]
if "G3" in records:
    g3 = records["G3"]
    print(f"G3 {g3['verdict']}: {g3['settings']['candidate']} against {g3['settings']['baseline']}")
    print(page.g3_table(g3).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
else:
    print("G3 was not run (G2 did not pass)")

# %%
if "G3" in records:
    note = " ".join(records["G3"]["notes"])  # gates.g3.why
    display(Markdown(f"**Why this comparison.** {note}" if note else ""))
    display(page.styled_verdicts(page.g3_table(records["G3"])))
    correct = page.g3_correctness(records["G3"])
    if not correct.empty:
        display(page.styled_verdicts(correct))

# %% [markdown]
# ## G4 — the stability soak (evidence R5)
#
# Failed requests outside the injected faults, TTFT p99 drift and memory growth over the steady windows, the pool
# held under its budget by eviction, and each injected fault detected and recovered from; a corrupted chunk
# handed to the engine fails its line, and a changed output is a wrong answer.

# %% tags=["nbval-check-output"]
if "G4" in records:
    print(f"G4 {records['G4']['verdict']}")
    print(page.g4_table(records["G4"]).drop(columns="why").to_string(index=False))
else:
    print("G4 was not run (the soak is off, or an earlier gate stopped the run)")

# %%
if "G4" in records:
    display(page.styled_verdicts(page.g4_table(records["G4"])))

# %% [markdown]
# ## The records
#
# Each record names the files its verdict was computed from, with their sha256.

# %%
for gate, r in records.items():
    print(f"{gate} {r['verdict']} checked {r['checked_at']} from:")
    for source in r["inputs"]:
        print(f"  {source['path']}  sha256 {source['sha256'][:16]}…")

# %%
if out_dir:
    for path in page.write_evidence(records, out_dir):
        print(f"wrote {Path(path).name}")
