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
# # R7 — G2 single-node baseline: what each tier path and the engine deliver before any KV is put on them
#
# Document 003 lists R7 as the single-node baseline. Here, per tier path: fio's direct sequential write and read
# bandwidth and its 4 KiB random-read IOPS at each configured queue depth, repeated (`kvtier g2-storage`; the
# pool path's sequential reads are R1's fio rounds of the same run, not measured twice); and the campaign's
# recompute TTFT (every token prefilled) and engine-hit TTFT (the KV already in vLLM's prefix cache: the floor
# no tier can go under), one value per round. A line passes when its repetitions are stable (coefficient of
# variation at most the bound) and, where a floor is configured, when its median meets it (`kvtier.gates.g2`).

# %% tags=["parameters"]
gates_dir = "../tests/fixtures/gates"  # a run's gate records (G2.json)
out_dir = ""  # evidence folder for R7_deliverable.csv; empty: write nothing

# %%
from pathlib import Path

from IPython.display import display

from kvtier.core.table_io import write_table
from kvtier.gates import page

g2 = page.load(gates_dir).get("G2")

# %% [markdown]
# ## Verdict

# %% tags=["nbval-check-output"]
if g2 is None:
    print("G2 was not run (G1 did not pass)")
else:
    lines = page.g2_lines(g2)
    print(f"G2 {g2['verdict']}: {sum(lines['verdict'] == 'PASS')} of {len(lines)} lines pass (max cv "
          f"{g2['settings']['max_cv']:g}; floors {g2['settings']['floors'] or 'none'})")

# %% [markdown]
# ## What each tier path delivers (median over the repetitions; GB/s, or IOPS)

# %% tags=["nbval-check-output"]
if g2 is not None:
    print(page.deliverable(g2).to_string(float_format=lambda v: f"{v:.4g}", na_rep=""))

# %% [markdown]
# ## Every baseline line

# %%
if g2 is not None:
    display(page.styled_verdicts(lines))

# %%
if out_dir and g2 is not None:
    print(f"wrote {write_table(page.deliverable(g2).reset_index(), Path(out_dir) / 'R7_deliverable.csv').name}")
