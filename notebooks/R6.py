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
# # R6 — G1 arrival acceptance: the platform against its bill of materials
#
# Document 003 lists R6 as the record of arrival acceptance: the machine that arrived is the one that was
# ordered. Here the bill of materials is the config's `gates.g1.expect`: lines of a field of the platform record
# (`kvtier probe`, the record R4 shows), an operator (equals, at least, at most, matches, one of) and the expected
# value, each with why it matters. The pipeline checks it before anything is measured (`kvtier.gates.bom`); a FAIL
# stops the run there, naming the failed lines. A field the record leaves empty fails as "not recorded"; a field
# the record cannot hold at all is refused when the config is loaded. The gates page shows G1 beside G2 and G3.

# %% tags=["parameters"]
gates_dir = "../tests/fixtures/gates"  # a run's gate records (G1.json and platform.json)
out_dir = ""  # evidence folder for R6_lines.csv; empty: write nothing

# %%
from pathlib import Path

from IPython.display import display

from kvtier.core.table_io import write_table
from kvtier.gates import page

g1 = page.load(gates_dir)["G1"]
lines = page.g1_table(g1)

# %% [markdown]
# ## Verdict

# %% tags=["nbval-check-output"]
print(f"G1 {g1['verdict']}: {sum(lines['verdict'] == 'PASS')} of {len(lines)} lines pass; platform record "
      f"{g1['inputs'][0]['path']}")

# %% [markdown]
# ## The bill of materials, line by line

# %% tags=["nbval-check-output"]
print(lines.drop(columns="why").to_string(index=False))

# %%
display(page.styled_verdicts(lines))

# %%
if out_dir:
    print(f"wrote {write_table(lines, Path(out_dir) / 'R6_lines.csv').name}")
