"""`kvtier render` with real papermill and nbconvert, on small notebooks made here."""

import json

import nbformat
import pytest

from kvtier.core.errors import KvtierError
from kvtier.evidence import render

from conftest import run


def make_notebook(path, body: str):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('out_dir = ""\nvalue = 0')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


WRITE_THEN = ("from pathlib import Path\n"
              "Path(out_dir, 'table.csv').write_text(f'value\\n{value}\\n')\n"
              "print('value is', value)\n")


def test_render_executes_converts_and_seals_with_a_manifest(tmp_path):
    nb = make_notebook(tmp_path / "X.ipynb", WRITE_THEN)
    raw = tmp_path / "raw.csv"
    raw.write_text("a\n1\n")
    out = tmp_path / "evidence" / "X"
    out.mkdir(parents=True)
    page = render.render("X", nb, out, {"out_dir": str(out), "value": 7}, [str(raw)], cwd=tmp_path)
    assert "value is 7" in page.read_text()
    assert (out / "table.csv").read_text() == "value\n7\n"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["made_by"]["parameters"] == {"out_dir": str(out), "value": 7}
    assert [i["path"] for i in manifest["inputs"]] == [str(raw)]
    assert {o["path"].rsplit("/", 1)[1] for o in manifest["outputs"]} == {"X.html", "X.ipynb", "table.csv"}


def test_pages_fold_their_code_and_draw_chinese_with_a_cjk_font_stack(tmp_path):
    nb = make_notebook(tmp_path / "X.ipynb", "print('对比本地 NVMe 单盘：吞吐提升 29–40%')\nsecret_marker = 1")
    out = tmp_path / "out"
    page = render.render("X", nb, out, {"out_dir": str(out)}, [], cwd=tmp_path).read_text()
    folded = page.split('<details class="kvtier-code">')
    assert len(folded) == 4, "every code cell folded"  # the parameters, papermill's injected ones, the body
    assert "secret_marker" in folded[3].split("</details>")[0], "the code is inside the fold"
    assert "对比本地 NVMe 单盘" in page.split("</details>")[-1], "the output stays visible, after the fold"
    assert "Noto Sans CJK SC" in page and "overflow-x: auto" in page
    # nbconvert's own templates are still there to choose.
    plain = render.render("X", nb, tmp_path / "lab", {"out_dir": str(tmp_path / "lab")}, [], html_template="lab",
                          cwd=tmp_path).read_text()
    assert "kvtier-code" not in plain and "secret_marker" in plain


def test_a_failing_cell_is_named_and_leaves_nothing_half_written(tmp_path):
    nb = make_notebook(tmp_path / "X.ipynb", WRITE_THEN + "raise ValueError('reading out of range')\n")
    out = tmp_path / "X"
    out.mkdir()
    (out / "manifest.json").write_text("{}")  # from an earlier, successful render
    with pytest.raises(KvtierError, match=r"cell In \[3\] failed: ValueError: reading out of range"):
        render.render("X", nb, out, {"out_dir": str(out)}, [], cwd=tmp_path)
    assert sorted(p.name for p in out.iterdir()) == []


def test_missing_notebook_or_input_is_named(tmp_path):
    with pytest.raises(KvtierError, match="nope.ipynb: notebook not found"):
        render.render("X", tmp_path / "nope.ipynb", tmp_path, {}, [])
    nb = make_notebook(tmp_path / "X.ipynb", "pass")
    with pytest.raises(KvtierError, match="gone.csv: input of X not found"):
        render.render("X", nb, tmp_path / "out", {}, [str(tmp_path / "gone.csv")])


def test_cli_types_parameters_and_reports_errors(tmp_path):
    nb = make_notebook(tmp_path / "X.ipynb", "assert isinstance(value, int), type(value)\nprint(value * 2)")
    proc = run(["kvtier", "render", "X", "--notebook", str(nb), "--out-dir", "out", "--param", "value=21"],
               cwd=tmp_path)
    assert "X: rendered out/X.html" in proc.stdout
    assert "42" in (tmp_path / "out" / "X.html").read_text()
    proc = run(["kvtier", "render", "X", "--notebook", str(nb), "--out-dir", "out", "--param", "2bad=1"],
               cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "--param '2bad=1'" in proc.stderr
