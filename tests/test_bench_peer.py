"""kvtier and the peer client, `vllm bench serve`, on the same real vLLM server and workload shape."""

import pytest

from kvtier.bench.peer import LOG_FILE, RESULT_FILE, vllm_bench_serve
from kvtier.bench.runner import BenchConfig, Runner
from kvtier.stack.fork_server import STARTED_NOTE

from conftest import run

pytestmark = pytest.mark.vllm

# Stated tolerance: the two medians agree within 15% of the peer's, or 15 ms, whichever is larger. The clients
# differ by design in one detail: the peer stops its TTFT clock at the first event with choices, kvtier at the
# first non-empty token (a byte-level BPE token can stream as an empty string).
RELATIVE, ABSOLUTE_S = 0.15, 0.015
# One round of each, through `kvtier import` and `kvtier compare` as a user would: no range of rounds to widen, so
# 25 % (the two clients' TTFT medians here have differed by up to 20 % in a single round on this shared machine).
SINGLE_ROUND = 0.25
# One request at a time: then a TTFT is the server's prefill plus each client's own clock, which is what the two
# must agree on. At concurrency 4 the per-request TTFTs of this CPU server split into two groups (35-50 ms when a
# prefill runs alone, 100-150 ms when it waits behind the batch's other prefills), so a median of 32 flips between
# the groups with the closed loop's phase: the peer's moved from 100 to 155 ms between two rounds here, and CI saw
# kvtier at 96-106 ms against the peer's 124-131 ms, which is the loop's phase and not either clock. The same
# token ids sent one at a time by both clients' request functions measured 28.8 vs 29.1 ms (medians of 15); in this
# test kvtier reads 3-5 ms less than the peer, whose prompts are text the server tokenizes first.
SHAPE = dict(input_tokens=512, output_tokens=16, concurrency=1)


def test_ttft_p50_agrees_with_vllm_bench_serve(vllm_server, tiny_model, tmp_path):
    # The clients take turns (peer, kvtier, peer, kvtier) so that drift of a shared, noisy machine shows up in the
    # peer's own spread instead of as a disagreement: kvtier must fall within the peer's range, widened by the
    # tolerance.
    shape = SHAPE
    peers, ours = [], []
    for round_ in range(2):
        peer = vllm_bench_serve(base_url=vllm_server.base_url, model="tiny", tokenizer=str(tiny_model),
                                num_prompts=32, result_dir=str(tmp_path / f"peer{round_}"), seed=11 + round_,
                                **shape)
        assert peer["completed"] == 32
        peers.append(peer["median_ttft_ms"] / 1000)
        summary = Runner(BenchConfig(base_url=vllm_server.base_url, model="tiny", workload="random", requests=32,
                                     input_tokens=shape["input_tokens"], output_tokens=shape["output_tokens"],
                                     concurrency=[shape["concurrency"]], seed=7 + round_), tmp_path / f"ours{round_}",
                         progress=False).run()
        window = summary["windows"][0]
        assert window["requests"]["ok"] == 32
        ours.append(window["ttft_s"]["p50"])
    # Both peer runs forked from the session's fork server (vLLM imported there once), as vLLM's servers are.
    for round_ in range(2):
        assert STARTED_NOTE in (tmp_path / f"peer{round_}" / LOG_FILE).read_text()
    print("TTFT p50: vllm bench serve " + ", ".join(f"{p * 1000:.1f}" for p in peers) + " ms; kvtier "
          + ", ".join(f"{o * 1000:.1f}" for o in ours) + " ms")
    ours_p50 = sum(ours) / len(ours)
    low, high = min(peers), max(peers)
    assert low - max(RELATIVE * low, ABSOLUTE_S) <= ours_p50 <= high + max(RELATIVE * high, ABSOLUTE_S), (ours, peers)

    # The same last round, as a user compares the two tools: the peer's saved result imported, then compared.
    run(["kvtier", "import", "vllm-bench-serve", str(tmp_path / "peer1" / RESULT_FILE), "--out",
         str(tmp_path / "peer1-imported")], cwd=tmp_path)
    # Never held closer than the peer agrees with itself: its own two rounds' spread on top of the tolerance (a run
    # here saw the peer's median move from 58.8 to 71.3 ms between its rounds, kvtier's at 52.3 and 48.1 ms).
    tolerance = max(SINGLE_ROUND, RELATIVE + (high - low) / low)
    compared = run(["kvtier", "compare", str(tmp_path / "ours1"), str(tmp_path / "peer1-imported"),
                    "--metric", "ttft_s.p50", "--metric", "requests.ok", "--tolerance", f"{tolerance:.3f}",
                    "--abs-tolerance-s", str(ABSOLUTE_S)], cwd=tmp_path, check=False)
    print(compared.stdout)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "2 AGREE, 0 DIFFER" in compared.stdout and "vllm bench serve" in compared.stdout
