"""Evidence writers: tables, charts, atomic writes, the index."""

import json

import pytest

from kvtier.core import atomic
from kvtier.core.errors import KvtierError
from kvtier.core.table_io import read_table
from kvtier.evidence import index, r2

from conftest import PUBLISHED


def test_write_evidence_writes_tables_and_both_chart_formats(tmp_path):
    derived = r2.load(PUBLISHED)
    written = {p.name for p in r2.write_evidence(derived, tmp_path, png_scale=1)}
    assert written == {"R2_table.csv", "R2_pool_vs_local_disk.csv", "R2_vs_recompute.csv",
                       "R2_chart.png", "R2_chart.svg"}
    assert (tmp_path / "R2_chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "R2_chart.svg").read_text()
    assert svg.lstrip().startswith("<svg") and "shared pool" in svg and "TTFT p50" in svg
    table = read_table(tmp_path / "R2_table.csv")
    assert table["recompute_ttft_p50_s"].isna().sum() == 2  # missing stays missing through the CSV
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def _fake_rendered(evidence, item):
    from kvtier.evidence.catalog import BY_ID
    entry = BY_ID[item]
    (evidence / entry.page).parent.mkdir(parents=True, exist_ok=True)
    (evidence / entry.page).write_text("<html></html>")
    (evidence / entry.folder / "manifest.json").write_text(json.dumps({"item": item}))


def test_index_links_rendered_items_and_lists_the_rest(tmp_path):
    _fake_rendered(tmp_path, "R2")
    page = index.build(tmp_path, ["R2"]).read_text()
    assert '<a href="R2/R2.html"><b>R2</b>' in page
    rendered, missing = page.split("Not built by this run")
    assert "R2/R2.html" in rendered and "<b>R1</b>" in missing and "<b>R1</b>" not in rendered
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [m["item"] for m in manifest["items"]] == ["R2"]


def test_an_item_this_run_did_not_make_is_listed_with_the_reason(tmp_path):
    _fake_rendered(tmp_path, "R2")
    page = index.build(tmp_path, ["R2"], {"S": "not emulated here: not root"}).read_text()
    missing = page.split("Not built by this run")[1]
    assert "<b>S</b>" in missing and "<i>(not emulated here: not root)</i>" in missing
    with pytest.raises(KvtierError, match="unknown evidence item"):
        index.build(tmp_path, ["R2"], {"Z": "why"})


def test_the_package_manifest_is_linked_as_written_after_the_index(tmp_path):
    _fake_rendered(tmp_path, "R2")
    rendered, missing = index.build(tmp_path, ["R2", "R8"]).read_text().split("Not built by this run")
    assert '<a href="package_manifest.json"><b>R8</b>' in rendered and "(written after this page)" in rendered
    assert "<b>R8</b>" not in missing
    assert [m["item"] for m in json.loads((tmp_path / "manifest.json").read_text())["items"]] == ["R2"]


def test_an_index_with_every_item_built_has_no_empty_not_built_section(tmp_path):
    from kvtier.evidence.catalog import CATALOG
    for entry in CATALOG:
        if not entry.written_after_index:
            _fake_rendered(tmp_path, entry.id)
    page = index.build(tmp_path, [entry.id for entry in CATALOG]).read_text()
    assert "Not built by this run" not in page and 'class="missing"' not in page
    assert page.count("<li>") == len(CATALOG)


def test_index_refuses_an_item_that_was_not_rendered(tmp_path):
    with pytest.raises(KvtierError, match="R2 has not been rendered"):
        index.build(tmp_path, ["R2"])
    assert not (tmp_path / "index.html").exists()


def test_index_refuses_unknown_items(tmp_path):
    _fake_rendered(tmp_path, "R2")
    with pytest.raises(KvtierError, match="unknown evidence item"):
        index.build(tmp_path, ["R2", "R42"])
