"""Notebooks stay paired with their reviewable .py, declare papermill parameters, and hold headline outputs.

nbval (lax mode, configured in pyproject.toml) runs each notebook in notebooks/ and compares the outputs of
the cells tagged `nbval-check-output` with the committed ones.
"""

import jupytext
import nbformat
import pytest

from kvtier.evidence.notebooks import is_checked

from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def cell_sources(nb):
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_paired_with_its_py(ipynb):
    paired = ipynb.with_suffix(".py")
    assert paired.is_file(), f"{paired.name} missing: pair it with `jupytext --set-formats ipynb,py:percent`"
    assert cell_sources(nbformat.read(ipynb, as_version=4)) == cell_sources(jupytext.read(paired)), (
        f"{ipynb.name} and {paired.name} differ: run `jupytext --sync {paired.relative_to(ROOT)}`")


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_parameters_and_checked_headline_cells(ipynb):
    nb = nbformat.read(ipynb, as_version=4)
    parameters = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1, "exactly one papermill 'parameters' cell"
    assert "out_dir =" in parameters[0].source, "every notebook writes its evidence to a parameterized folder"
    checked = [c for c in nb.cells if is_checked(c)]
    assert checked and all(c.outputs for c in checked), "headline cells must be committed with their outputs"


def test_every_notebook_is_rendered_by_a_rule():
    assert "R2.ipynb" in [p.name for p in NOTEBOOKS]
    rules = "".join(p.read_text() for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    for ipynb in NOTEBOOKS:
        assert f"notebooks/{ipynb.name}" in rules
