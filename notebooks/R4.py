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
# # R4 — the platform and software stack of every run
#
# Document 003 lists R4 as the record of the platform and stack behind the published numbers. Here every run
# directory of the campaign keeps the record taken when it ran (`kvtier probe`: CPUs, memory, NUMA, accelerators,
# the mount and block device behind each tier path, kernel, package versions, the LMCache build and patch set,
# the model's config hash). This page sets them side by side (`kvtier.evidence.r4`): first the fields whose value
# is not the same in every run, one column per run directory, highlighted, the cells that differ from the row's
# most common value in red; then the fields every run shares, once. A field a run's record does not have is
# empty (for instance a run that serves no model records none). Environment variables whose name looks like a
# secret are never recorded: the record's schema refuses them.

# %% tags=["parameters"]
runs_dir = "../tests/fixtures"  # a campaign's runs (raw_data/runs/<campaign>); every platform.json under it
out_dir = ""  # evidence folder for R4_platform.csv; empty: write nothing

# %%
from pathlib import Path

from IPython.display import display

from kvtier.core.table_io import write_table
from kvtier.evidence import r4

frame = r4.side_by_side(runs_dir)

# %% [markdown]
# ## The runs

# %% tags=["nbval-check-output"]
print(f"{frame.shape[1]} run directories, {frame.shape[0]} fields; {len(r4.differing(frame))} differ between runs")
for name in r4.find(runs_dir):
    print(f"  {name}")

# %% [markdown]
# ## What differs between runs

# %%
display(r4.styled_differing(frame))

# %% [markdown]
# ## What every run shares

# %%
display(r4.shared(frame).to_frame())

# %%
if out_dir:
    path = write_table(frame.reset_index(), Path(out_dir) / "R4_platform.csv")
    print(f"wrote {path.name}")
