"""What each job of the pipeline asks a cluster scheduler for (`snakemake --profile profiles/slurm`): the
Snakemake resources of its two kinds of job, from the config's `cluster:` section and the servers' settings.

    measurement  the tier runs, R1's reads and resume, B's cells, G2's storage passes, R9's loads, and the platform
                 probe (it must see the node the measurements run on, accelerators included): a whole node
                 (`--exclusive`) and the accelerators vLLM's tensor parallelism needs
    small        everything else: renders, replays, the audit, builds, aggregations, the gates' verdicts

The keys are those of snakemake-executor-plugin-slurm (slurm_partition, slurm_account, slurm_extra, gpu,
gpu_model, gres, runtime in minutes, mem_mb, cpus_per_task); Snakemake's local executor ignores them. The
`measurement` resource itself (one at a time in one Snakemake process) stays on the rules.
"""

from __future__ import annotations

import math

from ..core.errors import KvtierError

KINDS = ("measurement", "small")
# How each platform's accelerators are asked for: Slurm's `gpu` resource (gres gpu:N), or a gres of its own.
GPU_PLATFORMS = ("cuda", "rocm")
GRES_PLATFORMS = {"npu": "npu"}


def check(cluster: dict, platform: str, source: str = "config") -> None:
    """Refuse settings that would be dropped silently: a GPU model on a platform without GPUs."""
    if cluster.get("gpu_model") and platform not in GPU_PLATFORMS:
        raise KvtierError(f"{source}: cluster.gpu_model {cluster['gpu_model']!r} asks for GPUs, but "
                          f"runs.server.platform is {platform!r}; GPUs are asked for on "
                          f"{' or '.join(GPU_PLATFORMS)} only (leave cluster.gpu_model empty)")


def job_resources(cluster: dict, platform: str = "cpu", tensor_parallel_size: int = 1) -> dict[str, dict]:
    """{kind: resources} for KINDS, from a validated `cluster:` config section and runs.server's platform and
    tensor parallelism."""
    common = {}
    if cluster.get("partition"):
        common["slurm_partition"] = cluster["partition"]
    if cluster.get("account"):
        common["slurm_account"] = cluster["account"]
    measure, small = cluster["measurement"], cluster["small"]
    measurement = {**common, "runtime": measure["runtime_min"], "mem_mb": measure["mem_mb"],
                   "cpus_per_task": measure["cpus"]}
    if measure["exclusive"]:
        measurement["slurm_extra"] = "--exclusive"
    if platform in GPU_PLATFORMS:
        measurement["gpu"] = tensor_parallel_size
        if cluster.get("gpu_model"):
            measurement["gpu_model"] = cluster["gpu_model"]
    elif platform in GRES_PLATFORMS:
        measurement["gres"] = f"{GRES_PLATFORMS[platform]}:{tensor_parallel_size}"
    return {"measurement": measurement,
            "small": {**common, "runtime": small["runtime_min"], "mem_mb": small["mem_mb"],
                      "cpus_per_task": small["cpus"]}}


# A job that runs for a set time (the soak) gets it, plus this share and this many minutes for its servers' starts,
# restarts and the verdict, when that is more than the configured runtime_min: a 72-hour soak must not be cancelled
# by a measurement job's default 4 hours.
RUNTIME_MARGIN, RUNTIME_SLACK_MIN = 0.10, 30


def runtime_for(seconds: float, resources: dict) -> dict:
    """`resources` (a job kind's, job_resources) with the runtime a job that runs for `seconds` needs."""
    needed = math.ceil(seconds * (1 + RUNTIME_MARGIN) / 60) + RUNTIME_SLACK_MIN
    return {**resources, "runtime": max(resources["runtime"], needed)}
