"""kvtier and the peer client, `vllm bench serve`, on the same real vLLM server and workload shape."""

import pytest

from kvtier.bench.peer import vllm_bench_serve
from kvtier.bench.runner import BenchConfig, Runner

pytestmark = pytest.mark.vllm

# Stated tolerance: the two medians agree within 15% of the peer's, or 15 ms, whichever is larger. The clients
# differ by design in one detail: the peer stops its TTFT clock at the first event with choices, kvtier at the
# first non-empty token (a byte-level BPE token can stream as an empty string).
RELATIVE, ABSOLUTE_S = 0.15, 0.015


def test_ttft_p50_agrees_with_vllm_bench_serve(vllm_server, tiny_model, tmp_path):
    shape = dict(input_tokens=512, output_tokens=16, concurrency=4)
    peer = vllm_bench_serve(base_url=vllm_server.base_url, model="tiny", tokenizer=str(tiny_model), num_prompts=32,
                            result_dir=str(tmp_path / "peer"), **shape)
    assert peer["completed"] == 32
    ours = Runner(BenchConfig(base_url=vllm_server.base_url, model="tiny", workload="random", requests=32,
                              input_tokens=shape["input_tokens"], output_tokens=shape["output_tokens"],
                              concurrency=[shape["concurrency"]], seed=7), tmp_path / "ours", progress=False).run()
    window = ours["windows"][0]
    assert window["requests"]["ok"] == 32
    peer_p50, ours_p50 = peer["median_ttft_ms"] / 1000, window["ttft_s"]["p50"]
    print(f"TTFT p50: vllm bench serve {peer_p50 * 1000:.1f} ms, kvtier {ours_p50 * 1000:.1f} ms")
    assert abs(ours_p50 - peer_p50) <= max(RELATIVE * peer_p50, ABSOLUTE_S), (ours_p50, peer_p50)
