"""Keep a notebook's .ipynb in step with its reviewable jupytext .py (maintainer tool: `kvtier notebook-sync`).

The .py is what reviewers read and edit. The .ipynb is regenerated from it, executed once in its own folder with
its default parameters, and committed with outputs only in the cells tagged `nbval-check-output`: those are what
nbval checks, and keeping only those keeps the committed notebook small and free of incidental output.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from ..core.atomic import write_text
from ..core.errors import KvtierError

CHECK_TAG = "nbval-check-output"


def is_checked(cell) -> bool:
    return cell.cell_type == "code" and CHECK_TAG in cell.metadata.get("tags", [])


def sync(py_path: str | os.PathLike, timeout_s: int = 600) -> Path:
    py_path = Path(py_path)
    if py_path.suffix != ".py" or not py_path.is_file():
        raise KvtierError(f"{py_path}: expected an existing jupytext .py notebook")
    nb = jupytext.read(py_path)
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(py_path.parent)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        raise KvtierError(f"{py_path}: a cell failed, the .ipynb was not rewritten:\n{exc}") from None
    for number, cell in enumerate(nb.cells):
        # jupytext draws cell ids at random: derive them from place and source, so a sync without an edit
        # rewrites nothing.
        cell.id = hashlib.sha256(f"{number}\n{cell.source}".encode()).hexdigest()[:8]
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)  # timestamps: noise in every diff
        if not is_checked(cell):
            cell.outputs = []
    nb.metadata.pop("papermill", None)
    out = py_path.with_suffix(".ipynb")
    write_text(out, nbformat.writes(nb) + "\n")
    return out
