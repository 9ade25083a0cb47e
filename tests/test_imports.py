"""`kvtier import` and `kvtier compare`: the tolerance, bad input, a kvtier run's metrics. The fixtures from real
runs of each tool (tests/fixtures/imports/generate.py) are still to be made and committed (issue 18)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvtier.bench import compare
from kvtier.bench.imports import import_file, metrics
from kvtier.core.errors import KvtierError

KVTIER_RUN = Path(__file__).parent / "fixtures" / "r1" / "resume" / "resume"


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
