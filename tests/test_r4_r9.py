"""R4 (platform records side by side) and R9 (model-weight loads): the page logic on real platform records and on
loads whose answer is known, and R9's parts against the real disk (raw read, page-cache state, vLLM's log line)."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from kvtier.core.errors import KvtierError
from kvtier.evidence import r4, r9
from kvtier.probes import pagecache
from kvtier.runs import r9 as r9_run

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
RECORD = FIXTURES / "r1" / "reads" / "probes" / "platform.json"


def two_runs(tmp_path: Path, change) -> Path:
    """A campaign folder with two runs' records: the fixture's, and a copy changed by `change`."""
    for name in ("round-1/a", "round-1/b"):
        (tmp_path / name / "probes").mkdir(parents=True)
    shutil.copy(RECORD, tmp_path / "round-1" / "a" / "probes" / "platform.json")
    record = json.loads(RECORD.read_text())
    change(record)
    (tmp_path / "round-1" / "b" / "probes" / "platform.json").write_text(json.dumps(record))
    return tmp_path


def test_r4_one_column_per_run_and_only_what_differs_highlighted(tmp_path):
    campaign = two_runs(tmp_path, lambda r: r["memory"].update(total_bytes=1))
    frame = r4.side_by_side(campaign)
    assert list(frame.columns) == ["round-1/a", "round-1/b"]
    assert list(r4.differing(frame).index) == ["memory.total_bytes"]
    assert "memory.total_bytes" not in r4.shared(frame).index and "cpu.usable_cpus" in r4.shared(frame).index
    html = r4.styled_differing(frame).to_html()
    assert "#fff3cd" in html and "#c0392b" in html


def test_r4_refuses_a_record_with_a_secret_and_an_empty_campaign(tmp_path):
    campaign = two_runs(tmp_path, lambda r: r["environment"].update(HF_TOKEN="hf_x"))
    with pytest.raises(KvtierError, match="platform.json: 'HF_TOKEN' should not be valid"):
        r4.side_by_side(campaign)
    with pytest.raises(KvtierError, match="no platform records"):
        r4.find(tmp_path / "round-1" / "a" / "nothing")


def test_r4_flattens_nested_records_and_summarises_long_lists():
    flat = r4.flatten({"a": {"b": 1, "c": [{"d": 2}]}, "flags": list(range(20)), "none": {}})
    assert flat["a.b"] == 1 and flat["a.c.#"] == 1 and flat["a.c.0.d"] == 2
    assert flat["flags"].startswith("20 items: 0, 1, 2") and flat["none"] == "{}"


def loads_frame(cold_local, warm_local, cold_pool, warm_pool, raw=0.5) -> pd.DataFrame:
    rows = []
    for path, cold, warm in (("local_disk", cold_local, warm_local), ("shared_pool", cold_pool, warm_pool)):
        for state, values in (("cold", cold), ("warm", warm)):
            for rep, value in enumerate(values):
                rows.append({"rep": rep, "path": path, "state": state, "loading_weights_s": value,
                             "ready_s": value + 10, "raw_read_s": raw, "raw_read_gb_s": 2.0,
                             "resident_before_bytes": 0 if state == "cold" else 2**30})
    return pd.DataFrame(rows)


def test_r9_comparisons_pair_by_repetition_with_words():
    loads = loads_frame([2.0, 2.1, 1.9], [0.5, 0.52, 0.48], [4.0, 4.2, 3.8], [0.5, 0.5, 0.5])
    table = r9.comparisons(loads).set_index(["comparison", "reading"])
    pool_cold = table.loc[("shared_pool / local_disk, cold", "loading_weights_s")]
    assert pool_cold["point"] == pytest.approx(2.0) and pool_cold["word"] == "longer"
    assert table.loc[("local_disk: cold / warm", "loading_weights_s"), "point"] == pytest.approx(4.0)
    assert table.loc[("shared_pool / local_disk, warm", "loading_weights_s"), "word"] == "no difference measured"
    assert table.loc[("local_disk, cold: vLLM's load / raw read", "loading_weights_s"), "point"] == pytest.approx(4.0)
    medians = r9.table(loads).set_index(["path", "state"])
    assert medians.loc[("shared_pool", "cold"), "loading_weights_s"] == 4.0
    assert medians.loc[("local_disk", "warm"), "resident_before_mib"] == 1024


def test_r9_a_cold_read_faster_than_its_paths_emulated_cap_is_not_cold():
    loads = loads_frame([2.0, 2.1], [0.5, 0.5], [4.0, 4.2], [0.5, 0.5]).assign(resident_before_raw_bytes=0)
    loads.loc[(loads["path"] == "local_disk") & (loads["state"] == "cold"), "raw_read_gb_s"] = [0.2, 0.225]
    caps = {"local_disk": 200e6, "shared_pool": 357e6}  # shared_pool's cold reads: 2 GB/s, over its cap
    emulation = {"tiers": {name: {"in_force": {"read_bps": cap, "write_bps": cap}} for name, cap in caps.items()}}
    measured = r9.Loads({}, loads, r9.table(loads), r9.comparisons(loads), emulation)
    cold = r9.cold_reads(measured).set_index("path")
    assert cold.loc["local_disk", "verdict"] == r9.COLD  # 225 MB/s: within 200 MB/s + 15 %
    assert cold.loc["local_disk", "fastest_mb_s"] == pytest.approx(225)
    assert cold.loc["shared_pool", "verdict"] == r9.NOT_COLD
    assert cold.loc["shared_pool", "resident_before_mib"] == 0
    unchecked = r9.cold_reads(r9.Loads({}, loads, r9.table(loads), r9.comparisons(loads)))
    assert set(unchecked["verdict"]) == {r9.UNCHECKED} and unchecked["cap_mb_s"].isna().all()


def test_r9_says_how_its_starts_were_made_and_compares_ready_s_only_between_starts_made_alike():
    loads = loads_frame([2.0, 2.1, 1.9], [0.5, 0.52, 0.48], [4.0, 4.2, 3.8], [0.5, 0.5, 0.5])
    readings = lambda frame: set(r9.comparisons(frame)["reading"])  # noqa: E731
    assert "ready_s" in readings(loads) and "includes vLLM's import" in r9.starts(loads)  # an older run: whole
    forked = loads.assign(start=r9.FORKED)
    assert "ready_s" in readings(forked) and "leaves vLLM's import out" in r9.starts(forked)
    mixed = forked.assign(start=[r9.WHOLE] + [r9.FORKED] * (len(forked) - 1))
    assert readings(mixed) == {"loading_weights_s"} and r9.starts(mixed).startswith(f"{len(mixed) - 1} of {len(mixed)}")


def test_the_pipeline_forks_r9s_starts_unless_its_config_asks_for_whole_ones():
    # The config forks by default (R9 compares vLLM's own loading-weights time, which a fork leaves as it is); a
    # caller of kvtier.runs.r9 that says nothing gets whole starts.
    from kvtier.core import config
    assert config.load(ROOT / "config" / "config.yaml")["r9"]["fork_server"] is True
    assert config.validate({})["r9"]["fork_server"] is True
    assert config.validate({"r9": {"fork_server": False}})["r9"]["fork_server"] is False
    assert r9_run.LoadSettings.__dataclass_fields__["fork"].default is False
    with pytest.raises(KvtierError, match="fork must be true or false, not 'yes'"):
        r9_run.LoadSettings(model_dir=str(ROOT), paths={"local_disk": "x"}, fork="yes")


def test_r9_refuses_a_start_kind_it_does_not_know(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"status": "complete"}))
    rows = loads_frame([2.0], [0.5], [4.0], [0.5]).assign(start="cloned").to_dict("records")
    (tmp_path / r9.LOADS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(KvtierError, match="start must be 'whole' or 'forked', not \\['cloned'\\]"):
        r9.load(tmp_path)


def test_r9_one_repetition_is_shown_undecided():
    table = r9.comparisons(loads_frame([2.0], [0.5], [4.0], [0.5]))
    assert set(table["word"]) == {"one round: not decided"}


def test_r9_refuses_an_incomplete_run(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"status": "incomplete", "error": "KvtierError: vLLM not ready"}))
    (tmp_path / "loads.jsonl").write_text("")
    with pytest.raises(KvtierError, match="run.json: the run is .incomplete., not complete .KvtierError: vLLM not ready"):
        r9.load(tmp_path)


def test_r9_raw_read_reads_every_byte_and_dropping_empties_the_page_cache(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\1" * (4 << 20))
    pagecache.drop(tmp_path)
    assert pagecache.resident_bytes(tmp_path) < (1 << 20)
    read = r9_run.raw_read(r9_run.weight_files(tmp_path))
    assert read["raw_read_bytes"] == 4 << 20 and read["raw_read_s"] > 0
    assert pagecache.resident_bytes(tmp_path) == 4 << 20, "a buffered read leaves the files in the page cache"
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(KvtierError, match="no weight files"):
        r9_run.weight_files(tmp_path)


def test_r9_takes_vllms_own_figure_from_the_part_of_the_log_this_start_wrote(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("(Worker pid=1) INFO [default_loader.py:501] Loading weights took 0.05 seconds\n")
    offset = log.stat().st_size
    assert r9_run.loading_weights_s(log, offset) is None
    with log.open("a") as f:
        f.write("(Worker pid=2) INFO [default_loader.py:501] Loading weights took 1.25 seconds\n")
    assert r9_run.loading_weights_s(log, offset) == 1.25


def test_r9_page_files_from_the_fixture_run(tmp_path):
    measured = r9.load(FIXTURES / "r9")
    written = r9.write_evidence(measured, tmp_path, png_scale=1)
    assert sorted(p.name for p in written) == ["R9_chart.png", "R9_chart.svg", "R9_comparisons.csv", "R9_table.csv"]
    assert "vLLM loading weights" in (tmp_path / "R9_chart.svg").read_text()
