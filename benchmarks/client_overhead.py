#!/usr/bin/env python3
"""What the load client itself costs: kvtier bench against vLLM's `vllm bench serve`, in the same run.

A minimal SSE server (kvtier.bench.instrument) answers every request at once with a 4-token stream, so the
client is the bottleneck. Server and client are pinned to different cores, and both CPU times are reported, to
show the server had headroom. Measured, per client:
  (a) capacity: requests/s on one client core, closed loop at concurrency 1, 64 and 256;
  (b) fidelity: TTFT p50/p99 at an open-loop Poisson rate well below both capacities.
Targets (from the issue): kvtier capacity >= 2x the peer's; TTFT p99 <= 1.5 ms at the open-loop rate.

    python benchmarks/client_overhead.py [--out benchmarks/results/client_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

CLIENT_CORE, SERVER_CORE = 0, 1


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def children_cpu_seconds() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def pinned(core: int):
    return lambda: os.sched_setaffinity(0, {core})


def run_client(cmd: list[str], server: subprocess.Popen) -> tuple[float, float]:
    """Run a client command on the client core; return (client CPU s, server CPU s) spent during it."""
    server_before, client_before = cpu_seconds(server.pid), children_cpu_seconds()
    subprocess.run(cmd, check=True, preexec_fn=pinned(CLIENT_CORE), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return children_cpu_seconds() - client_before, cpu_seconds(server.pid) - server_before


def kvtier(base_url: str, work: Path, name: str, requests: int, concurrency: int | None, rate: float | None):
    run_dir = work / f"kvtier-{name}"
    cmd = [sys.executable, "-m", "kvtier", "bench", "--base-url", base_url, "--model", "instrument",
           "--run-dir", str(run_dir), "--workload", "random", "--requests", str(requests), "--input-tokens", "16",
           "--output-tokens", "4"]
    cmd += ["--rate", str(rate)] if rate else ["--concurrency", str(concurrency)]
    return cmd, lambda: _kvtier_result(run_dir)


def _kvtier_result(run_dir: Path) -> dict:
    window = json.loads((run_dir / "summary.json").read_text())["windows"][0]
    return {"completed": window["requests"]["ok"], "failed": window["requests"]["failed"],
            "requests_per_s": window["request_rate_per_s"], "duration_s": window["duration_s"],
            "ttft_p50_ms": window["ttft_s"]["p50"] * 1e3, "ttft_p99_ms": window["ttft_s"]["p99"] * 1e3}


def peer(base_url: str, work: Path, name: str, requests: int, concurrency: int | None, rate: float | None,
         tokenizer: str):
    result_dir = work / f"peer-{name}"
    result_dir.mkdir(parents=True)
    from kvtier.bench import peer as peer_client
    spec = dict(base_url=base_url, model="instrument", tokenizer=tokenizer, input_tokens=16, output_tokens=4,
                num_prompts=requests, result_dir=str(result_dir), concurrency=concurrency, rate_per_s=rate)
    return peer_client.command(**spec), lambda: _peer_result(result_dir)


def _peer_result(result_dir: Path) -> dict:
    from kvtier.bench.peer import RESULT_FILE
    r = json.loads((result_dir / RESULT_FILE).read_text())
    return {"completed": r["completed"], "failed": r["failed"], "requests_per_s": r["request_throughput"],
            "duration_s": r["duration"], "ttft_p50_ms": r["median_ttft_ms"], "ttft_p99_ms": r["p99_ttft_ms"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/client_overhead.json")
    parser.add_argument("--requests", type=int, default=20000, help="requests per closed-loop measurement")
    parser.add_argument("--rate", type=float, default=1000.0, help="open-loop Poisson rate (requests/s)")
    parser.add_argument("--rate-requests", type=int, default=10000)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two cores: one for the client, one for the server")

    from kvtier.bench.instrument import spawn
    from kvtier.stack.model import ModelSpec, generate
    from kvtier.stack.process import free_port
    work = Path(tempfile.mkdtemp(prefix="kvtier-overhead-"))
    tokenizer = str(generate(work / "model", ModelSpec(layers=1, hidden=64, intermediate=128, heads=2,
                                                       kv_heads=1, head_dim=32)))  # the peer needs a tokenizer
    port = free_port()
    server = spawn(port, tokens=4, core=SERVER_CORE)
    base_url = f"http://127.0.0.1:{port}"
    results = {"capacity": [], "fidelity": []}
    try:
        plans = [("capacity", f"c{c}", args.requests if c > 1 else args.requests // 4, c, None)
                 for c in (1, 64, 256)] + [("fidelity", f"rate{args.rate:g}", args.rate_requests, None, args.rate)]
        for kind, name, requests, concurrency, rate in plans:
            for client in ("kvtier", "vllm bench serve"):
                if client == "kvtier":
                    cmd, read = kvtier(base_url, work, name, requests, concurrency, rate)
                else:
                    cmd, read = peer(base_url, work, name, requests, concurrency, rate, tokenizer)
                client_cpu, server_cpu = run_client(cmd, server)
                row = {"client": client, "concurrency": concurrency, "rate_per_s": rate, "requests": requests,
                       **read(), "client_cpu_s": client_cpu, "server_cpu_s": server_cpu}
                results[kind].append(row)
                print(json.dumps(row), flush=True)
    finally:
        server.kill()
        server.wait()

    def value(kind, client, key, **match):
        return next(r[key] for r in results[kind] if r["client"] == client
                    and all(r[k] == v for k, v in match.items()))

    ratios = {f"c{c}": value("capacity", "kvtier", "requests_per_s", concurrency=c)
              / value("capacity", "vllm bench serve", "requests_per_s", concurrency=c) for c in (1, 64, 256)}
    report = {
        "what": "client overhead: kvtier bench vs vllm bench serve against an instant 4-token SSE server",
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "client_core": CLIENT_CORE, "server_core": SERVER_CORE},
        "results": results,
        "capacity_ratio_kvtier_over_peer": ratios,
        "targets": {"capacity_ratio_at_least": 2.0, "ttft_p99_ms_at_most": 1.5},
        "targets_met": {"capacity": all(r >= 2.0 for r in ratios.values()),
                        "fidelity": value("fidelity", "kvtier", "ttft_p99_ms") <= 1.5},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"capacity_ratio": ratios, "targets_met": report["targets_met"]}, indent=2))


if __name__ == "__main__":
    main()
