import math
import re

import pytest

from kvtier.core.config import load_yaml
from kvtier.core.errors import KvtierError
from kvtier.core.hashing import sha256_file
from kvtier.evidence import r2
from kvtier.evidence.published import load_readings

from conftest import PUBLISHED

SOURCE = PUBLISHED / "sources" / "003_e1d8e216fdab151e.txt"


def source_table() -> str:
    """The markdown table under '## 原始读数' in the source document, verbatim."""
    text = SOURCE.read_text(encoding="utf-8")
    section = text.split("## 原始读数", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return "\n".join(lines) + "\n"


def test_sources_are_the_documents_the_provenance_names():
    provenance = load_yaml(PUBLISHED / "R2_provenance.yaml")
    assert provenance["source"]["document"] == SOURCE.name
    assert sha256_file(SOURCE) == provenance["source"]["sha256"]
    assert provenance["source"]["section"].lstrip("# ") in SOURCE.read_text(encoding="utf-8")
    assert provenance["level"] == "summary"


def test_regenerated_table_equals_the_published_one_character_for_character():
    # '---' vs '---' separators aside, the regenerated table is the report's table.
    assert r2.report_markdown(r2.load(PUBLISHED)) == source_table()


def test_stated_conditions_quote_the_document():
    text = SOURCE.read_text(encoding="utf-8")
    conditions = load_yaml(PUBLISHED / "R2_conditions.yaml")
    quotes = [v["quote"] for v in conditions.values() if isinstance(v, dict) and "quote" in v]
    quotes += [t["quote"] for t in conditions["tiers"].values()]
    assert len(quotes) >= 8
    for quote in quotes:
        assert quote in text, quote


def test_unpublished_cells_are_missing_not_zero():
    readings = load_readings(PUBLISHED / "R2_readings.csv")
    assert len(readings) == 9
    recompute = readings[readings["tier"] == "recompute"].set_index("concurrency")
    assert math.isnan(recompute.loc[8, "ttft_p50_s"]) and math.isnan(recompute.loc[32, "output_tok_s"])
    assert recompute.loc[16, "ttft_p50_s"] == 149.48
    assert (readings[["ttft_p50_s", "output_tok_s"]].fillna(1) > 0).all().all()


GOOD = "tier,concurrency,ttft_p50_s,output_tok_s\nshared_pool,8,7.53,56.6\n"


@pytest.mark.parametrize("text, named", [
    ("", ["empty file"]),
    ("tier,concurrency,ttft_p50_s\nshared_pool,8,1\n", ["missing column(s) output_tok_s"]),
    ("tier,concurrency,ttft_p50_s,output_tok_s,note\n", ["unknown column(s) note"]),
    (GOOD + "fx100,8,1,1\n", ["line 3", "'tier'", "'fx100'", "not a tier"]),
    (GOOD + "local_disk,eight,1,1\n", ["line 3", "'concurrency'", "'eight'", "integer"]),
    (GOOD + "local_disk,8,0,1\n", ["line 3", "'ttft_p50_s'", "'0'", "positive", "empty"]),
    (GOOD + "local_disk,8,1.2.3,1\n", ["line 3", "'ttft_p50_s'", "not a number"]),
    (GOOD + "local_disk,8,1\n", ["line 3", "3 cells", "header has 4"]),
    (GOOD + "shared_pool,8,7.5,56\n", ["line 3", "tier 'shared_pool' at concurrency 8", "line 2"]),
    (GOOD + ",8,1,1\n", ["line 3", "'tier' is empty"]),
    ("tier,concurrency,ttft_p50_s,output_tok_s\n", ["no readings"]),
])
def test_malformed_readings_are_refused_naming_file_line_and_column(tmp_path, text, named):
    path = tmp_path / "R2_readings.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(KvtierError) as err:
        load_readings(path)
    message = str(err.value)
    assert message.startswith(str(path))
    for fragment in named:
        assert fragment in message, (fragment, message)


def test_missing_readings_file_is_named(tmp_path):
    with pytest.raises(KvtierError, match=re.escape(f"{tmp_path / 'nope.csv'}: file not found")):
        load_readings(tmp_path / "nope.csv")


def test_document_000_table_is_transcribed_cell_for_cell():
    from kvtier.evidence.published import B_SPEC, load_table
    text = (PUBLISHED / "sources" / "000_858e5eafe124bac5.txt").read_text(encoding="utf-8")
    printed = [line.split("\t") for line in text.splitlines() if line.count("\t") == 3][1:]  # after the header
    table = load_table(PUBLISHED / B_SPEC.file, B_SPEC)
    regenerated = [[str(r.concurrency), f"{r.vram_ttft_s:.1f}", f"{r.offload_ttft_s:.1f}",
                    f"{r.improvement_pct:+.0f}%"] for r in table.itertuples()]
    assert regenerated == printed
    provenance = load_yaml(PUBLISHED / "B_provenance.yaml")
    assert sha256_file(PUBLISHED / "sources" / provenance["source"]["document"]) == provenance["source"]["sha256"]
