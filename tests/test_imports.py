"""`kvtier import` and `kvtier compare`: each tool's result from a real run (tests/fixtures/imports/, made by its
generate.py against one real vLLM; COMMANDS.md holds the exact commands and versions) mapped field by field with
nothing dropped, the tolerance, bad input, a kvtier run's metrics. The live comparison of `vllm bench serve` and
`kvtier bench` on one server is in tests/test_bench_peer.py."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvtier.bench import compare
from kvtier.bench.imports import import_file, metrics
from kvtier.core.errors import KvtierError

KVTIER_RUN = Path(__file__).parent / "fixtures" / "r1" / "resume" / "resume"
FIXTURES = Path(__file__).parent / "fixtures" / "imports"
SOURCES = {"vllm-bench-serve": "vllm_bench_serve.json", "guidellm": "guidellm.json",
           "aiperf": "aiperf_profile_export.json"}


def kvtier(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvtier", *args], capture_output=True, text=True)


def test_the_tolerance_decides_agree_and_differ():
    a = metrics.Window("w", 4, {"ttft_s.p50": 0.110, "output_tokens": 100, "request_rate_per_s": 10.0})
    b = metrics.Window("w", 4, {"ttft_s.p50": 0.100, "output_tokens": 100, "request_rate_per_s": 12.0})
    verdicts = {r.metric: r.verdict for r in compare.compare(a, b, 0.05)[0]}
    assert verdicts == {"ttft_s.p50": "DIFFER", "output_tokens": "AGREE", "request_rate_per_s": "DIFFER"}
    # The absolute floor applies to times only.
    verdicts = {r.metric: r.verdict for r in compare.compare(a, b, 0.05, abs_tolerance_s=5.0)[0]}
    assert verdicts == {"ttft_s.p50": "AGREE", "output_tokens": "AGREE", "request_rate_per_s": "DIFFER"}
    with pytest.raises(KvtierError, match="--metric e2e_s.p50: not in both runs"):
        compare.compare(a, b, 0.1, metrics=["e2e_s.p50"])


def test_bad_input_is_refused_naming_the_file_and_key(tmp_path):
    bad = tmp_path / "result.json"
    bad.write_text(json.dumps({"completed": "many", "duration": 3.0}))
    proc = kvtier("import", "vllm-bench-serve", str(bad), "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "result.json: key 'completed' = 'many'" in proc.stderr
    assert not (tmp_path / "run").exists()
    bad.write_text("{not json")
    proc = kvtier("import", "vllm-bench-serve", str(bad), "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "result.json: not a readable vllm bench serve result" in proc.stderr
    # An import never writes over a run.
    shutil.copytree(KVTIER_RUN, tmp_path / "taken")
    (tmp_path / "taken" / "run.json").write_text("{}")
    with pytest.raises(KvtierError, match="already holds a run"):
        import_file("vllm-bench-serve", bad, tmp_path / "taken")
    proc = kvtier("compare", str(tmp_path), str(KVTIER_RUN))
    assert proc.returncode == 2 and "neither a kvtier run" in proc.stderr


def test_a_kvtier_run_compared_with_itself_agrees_at_zero_tolerance():
    same = kvtier("compare", str(KVTIER_RUN), str(KVTIER_RUN), "--tolerance", "0")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "0 DIFFER" in same.stdout and "ttft_s.p50" in same.stdout
    other = kvtier("compare", str(KVTIER_RUN), str(KVTIER_RUN.parent / "engine_hit"), "--metric", "ttft_s.p50")
    assert other.returncode == 1 and "DIFFER" in other.stdout


def imported(fmt: str, tmp_path: Path) -> dict:
    out = tmp_path / fmt
    proc = kvtier("import", fmt, str(FIXTURES / SOURCES[fmt]), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "imported.json").read_text())
    assert (out / "source" / SOURCES[fmt]).read_bytes() == (FIXTURES / SOURCES[fmt]).read_bytes()
    return record


@pytest.mark.parametrize("fmt", SOURCES)
def test_each_tools_real_result_is_mapped_with_its_definitions(fmt, tmp_path):
    record = imported(fmt, tmp_path)
    source = json.loads((FIXTURES / SOURCES[fmt]).read_text())
    (window,) = record["windows"]
    assert window["window"] == "c4" and window["concurrency"] == 4  # the fixtures' shape: concurrency 4
    values = window["metrics"]
    # Each mapped value is the tool's own figure, in seconds, and says whose definition it carries.
    if fmt == "guidellm":
        (run,) = source["benchmarks"]
        ttft = run["metrics"]["time_to_first_token_ms"]["successful"]
        assert values["ttft_s.p50"] == pytest.approx(ttft["percentiles"]["p50"] / 1000)
        assert values["requests.ok"] == run["metrics"]["request_totals"]["successful"]
        assert values["output_tok_s.aggregate"] == pytest.approx(
            run["metrics"]["output_token_count"]["successful"]["total_sum"] / run["duration"])
        assert record["source"]["tool_version"] == source["metadata"]["guidellm_version"]
    elif fmt == "aiperf":
        assert values["ttft_s.p50"] == pytest.approx(source["time_to_first_token"]["p50"] / 1000)
        assert values["itl_s.mean"] == pytest.approx(source["inter_chunk_latency"]["avg"] / 1000)
        assert values["output_tokens"] == source["total_usage_completion_tokens"]["avg"]
        assert values["requests.ok"] == source["completed_request_count"]["avg"]
        assert record["source"]["tool_version"] == source["aiperf_version"]
    else:
        assert values["ttft_s.p50"] == pytest.approx(source["median_ttft_ms"] / 1000)
        assert values["requests.ok"] == source["completed"]
    assert {"ttft_s.p50", "requests.ok", "output_tok_s.aggregate", "duration_s"} <= set(values)
    assert all(window["definitions"][f].startswith(("vllm bench serve:", "guidellm:", "aiperf:", "kvtier from"))
               for f in ("ttft_s", "output_tok_s", "requests"))
    # Nothing the tool wrote is dropped: every top-level field is mapped, kept as metadata, or listed with why.
    listed = {u["field"].split(".")[0] for u in record["unmapped"]}
    assert all(u["why"] for u in record["unmapped"])
    if fmt != "guidellm":  # guidellm's fields live under each benchmark
        from kvtier.bench.imports import aiperf, vllm_bench
        mapped = ({*aiperf.DISTRIBUTIONS, *aiperf.SCALARS, "error_summary"} if fmt == "aiperf" else
                  {*vllm_bench.SCALARS, "num_prompts", *(k for k in source if vllm_bench.LATENCY.match(k))})
        assert set(source) <= listed | set(record["metadata"]) | mapped, set(source) - listed - mapped
    else:
        metric_fields = {u["field"].split(".", 2)[2].split(".")[0] for u in record["unmapped"]
                         if u["field"].startswith("benchmarks[0].metrics.")}
        assert {"time_to_first_output_token_ms", "time_per_output_token_ms", "output_tokens_per_second"} \
            <= metric_fields
        assert "benchmarks[0].requests" in {u["field"] for u in record["unmapped"]}


def test_the_fixtures_say_how_they_were_made():
    commands = (FIXTURES / "COMMANDS.md").read_text()
    for name in SOURCES.values():
        assert f"## {name}: " in commands
    assert "guidellm 0.8.1" in commands and "aiperf 0.13.0" in commands and "vllm 0.32.0" in commands
    for name in SOURCES.values():  # no path of the machine that made them
        assert "/tmp/" not in (FIXTURES / name).read_text() and "/home/" not in (FIXTURES / name).read_text()


def test_tools_compared_print_both_definitions_where_they_differ(tmp_path):
    for fmt in SOURCES:
        imported(fmt, tmp_path)
    proc = kvtier("compare", str(tmp_path / "aiperf"), str(tmp_path / "vllm-bench-serve"), "--tolerance", "0.25",
                  "--metric", "requests.ok", "--metric", "output_tokens", "--metric", "output_tok_s.aggregate")
    # aiperf counts output tokens with its own tokenizer for its rate; the counts both take from the server agree
    assert proc.returncode == 1 and re.search(r"^output_tokens +256 +256 +\+0\.0 %  AGREE$", proc.stdout, re.M)
    assert "aiperf: output tokens counted by its tokenizer" in proc.stdout and "2 AGREE, 1 DIFFER" in proc.stdout


@pytest.mark.parametrize("fmt, damage, named", [
    ("guidellm", lambda d: d.pop("benchmarks"), "a guidellm report is a JSON object with a 'benchmarks' list"),
    ("guidellm", lambda d: d["benchmarks"][0].update(duration=0), "benchmarks[0]: needs 'metrics' and a positive "
                                                                  "'duration' (got 0)"),
    ("guidellm", lambda d: d["benchmarks"][0]["metrics"].pop("request_latency"),
     "benchmarks[0].metrics.request_latency: expected a distribution by status"),
    ("aiperf", lambda d: d["time_to_first_token"].update(unit="furlongs"),
     "key 'time_to_first_token': unit 'furlongs' is not a time unit"),
    ("aiperf", lambda d: d.pop("benchmark_duration"), "key 'benchmark_duration' = None: expected a metric record"),
    ("aiperf", lambda d: d.pop("aiperf_version"), "an aiperf profile export is a JSON object with 'aiperf_version'"),
])
def test_a_damaged_result_is_refused_naming_the_key(tmp_path, fmt, damage, named):
    data = json.loads((FIXTURES / SOURCES[fmt]).read_text())
    damage(data)
    bad = tmp_path / SOURCES[fmt]
    bad.write_text(json.dumps(data))
    proc = kvtier("import", fmt, str(bad), "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and named in proc.stderr, proc.stderr
    assert not (tmp_path / "run").exists()


def test_one_tools_file_given_as_another_is_refused(tmp_path):
    proc = kvtier("import", "aiperf", str(FIXTURES / SOURCES["guidellm"]), "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "guidellm.json: an aiperf profile export" in proc.stderr
    proc = kvtier("import", "guidellm", str(FIXTURES / SOURCES["aiperf"]), "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "a guidellm report" in proc.stderr
