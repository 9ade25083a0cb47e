"""Render one evidence item: execute its notebook with papermill, convert it to HTML, record a manifest.

Everything lands in the item's evidence folder through temporary names, so a failed render leaves no half-written
page. The manifest names the notebook that made the outputs and the sha256 of every input and output.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..core.atomic import atomic_path, write_text
from ..core.errors import KvtierError
from ..core.hashing import file_record
from ..core.vcs import git_revision

if TYPE_CHECKING:
    import nbformat

MANIFEST_NAME = "manifest.json"
# kvtier's own nbconvert template (code folded, wide output scrolling, a CJK-capable font stack), beside
# nbconvert's own: lab, classic, basic.
TEMPLATES = Path(__file__).parent / "templates"
DEFAULT_TEMPLATE = "kvtier"


# papermill, nbconvert and nbformat are imported where a page is rendered: the workflow imports this module (for
# cli_args) every time Snakemake parses it, and they are most of a second of that.


def _execute(notebook: Path, executed: Path, parameters: dict, cwd: Path, cell_timeout_s: int) -> None:
    import papermill
    with atomic_path(executed) as tmp:
        try:
            papermill.execute_notebook(
                str(notebook), str(tmp), parameters=parameters, cwd=str(cwd), kernel_name="python3",
                execution_timeout=cell_timeout_s, progress_bar=False, log_output=False, report_mode=False,
            )
        except papermill.PapermillExecutionError as exc:
            raise KvtierError(f"{notebook}: cell In [{exc.exec_count}] failed: {exc.ename}: {exc.evalue}") from None


def _snapshot(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.iterdir() if p.is_file()}


def _remove_written_since(folder: Path, before: dict[Path, int]) -> None:
    """Undo a failed render: remove what it wrote, so no page mixes a new run's files with an old run's."""
    for path, mtime in _snapshot(folder).items():
        if before.get(path) != mtime:
            path.unlink(missing_ok=True)


def failed_gate_cell(failed: list[dict]) -> nbformat.NotebookNode:
    """The first cell of a page rendered after a gate that did not PASS: which gate, its verdict, which lines. Red
    after a FAIL (the run went on because gates.stop_on_fail is false), amber when every such gate was UNDECIDED
    (its rounds could not decide a line; the run goes on unless gates.stop_on_undecided is true)."""
    undecided_only = all(g.get("verdict") == "UNDECIDED" for g in failed)
    border, background = ("#b9770e", "#fef5e7") if undecided_only else ("#c0392b", "#fdecea")
    why = ("that could not decide every line (an interval straddles its threshold: more rounds, or a quieter "
           "machine, may decide it); the run went on because `gates.stop_on_undecided` is false"
           if undecided_only else "that did not pass; the run went on because `gates.stop_on_fail` is false")
    lines = [f"<div class=\"kvtier-after-failed-gate\" style=\"border:3px solid {border};padding:0.6em 1em;"
             f"background:{background}\">", "", f"**Rendered after a gate that did not pass.** These figures were "
             f"measured on a platform, or after a baseline or a gate, {why}. Read them as such.", ""]
    for gate in failed:
        lines.append(f"- **{gate['title']}: {gate.get('verdict', 'FAIL')}** (record `{gate['record']}`): "
                     + "; ".join(gate["failed"][:8]) + (" …" if len(gate["failed"]) > 8 else ""))
    lines += ["", "</div>"]
    import nbformat
    return nbformat.v4.new_markdown_cell("\n".join(lines))


def render(item: str, notebook: str | os.PathLike, out_dir: str | os.PathLike, parameters: dict,
           inputs: list[str], cell_timeout_s: int = 600, html_template: str = DEFAULT_TEMPLATE,
           cwd: str | os.PathLike = ".", after_failed_gates: list[dict] | None = None) -> Path:
    """Execute `notebook` into `out_dir` and export it; `after_failed_gates` (kvtier.gates.record.failed_gates) puts
    a banner naming them at the top of the page and into the manifest."""
    notebook, out_dir, cwd = Path(notebook), Path(out_dir), Path(cwd)
    if not notebook.is_file():
        raise KvtierError(f"{notebook}: notebook not found")
    for path in inputs:
        if not Path(path).is_file():
            raise KvtierError(f"{path}: input of {item} not found")
    out_dir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc)
    # The manifest is written last and seals the folder: without it the item counts as not rendered.
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    before = _snapshot(out_dir)
    try:
        executed = out_dir / f"{item}.ipynb"
        _execute(notebook, executed, parameters, cwd, cell_timeout_s)
        import nbformat
        from nbconvert import HTMLExporter
        exporter = HTMLExporter(template_name=html_template, extra_template_basedirs=[str(TEMPLATES)])
        node = nbformat.read(executed, as_version=4)
        if after_failed_gates:
            node.cells.insert(0, failed_gate_cell(after_failed_gates))
        body, _ = exporter.from_notebook_node(node)
        html = write_text(out_dir / f"{item}.html", body)
    except BaseException:
        _remove_written_since(out_dir, before)
        raise

    outputs = sorted(p for p in out_dir.iterdir() if p.is_file() and p.name != MANIFEST_NAME
                     and not p.name.startswith("."))
    manifest = {
        "item": item,
        "made_by": {"notebook": file_record(notebook), "parameters": parameters, "tool": f"kvtier {__version__}",
                    "source_revision": git_revision(cwd)},
        "inputs": [file_record(p) for p in sorted(inputs)],
        "outputs": [file_record(p) for p in outputs],
        "after_failed_gates": after_failed_gates or [],
        "rendered_at": {"start": started.isoformat(timespec="seconds"),
                        "end": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")},
    }
    write_text(out_dir / MANIFEST_NAME, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return html


def cli_args(item: str, notebook: str, out_dir: str, parameters: dict, inputs: list[str],
             cell_timeout_s: int = 600, html_template: str = DEFAULT_TEMPLATE, gates: list[str] = ()) -> list[str]:
    """The arguments of `kvtier render` that render `item` into `out_dir`, one list element per word.

    The workflow's rules pass them as `{params.argv:q}`: Snakemake quotes each element, so a path or value from
    the config (a space, a quote, `$(...)`) reaches `kvtier render` as the same one argument and never the shell.
    Every notebook takes `out_dir`, added here after `parameters`."""
    argv = [item, "--notebook", str(notebook), "--out-dir", str(out_dir), "--cell-timeout-s", str(cell_timeout_s),
            "--html-template", html_template]
    for name, value in {**parameters, "out_dir": out_dir}.items():
        argv += ["--param", f"{name}={value}"]
    for path in inputs:
        argv += ["--input", str(path)]
    for path in gates:
        argv += ["--gate", str(path)]
    return argv

