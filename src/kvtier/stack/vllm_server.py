"""vLLM's OpenAI server (its CPU build by default; an accelerator platform on a cluster) as a managed process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

from ..core import web
from ..core.errors import KvtierError
from .fork_server import Forked
from .process import ManagedProcess, free_port
from .vllm_cpu_serve import LAUNCH_MODULE, SERVER_MODULE

PLATFORMS = ("cpu", "cuda", "rocm", "npu")
LAUNCH_MODULES = {"cpu": LAUNCH_MODULE}  # the platforms that start vLLM through a module of ours


@dataclass
class VllmServer(ManagedProcess):
    """vLLM's OpenAI server. `platform` cpu (the default: vLLM's CPU build, KV space from `kv_cache_gib`) or an
    accelerator platform (cuda, rocm, npu: `gpu_memory_utilization` and `tensor_parallel_size` apply);
    `vllm_command` replaces how vLLM is launched (e.g. ["vllm", "serve"] or a container wrapper on a cluster)."""
    model_dir: str
    log_path: str
    served_name: str = "kvtier-model"
    port: int = 0
    dtype: str = "float32"
    max_model_len: int = 16384
    kv_cache_gib: float = 2.0
    kv_cache_bytes: int | None = None        # the engine's KV capacity exactly (--kv-cache-memory-bytes), any platform
    enforce_eager: bool = True
    prefix_caching: bool = True
    lmcache_port: int | None = None          # connect to an LMCache MP server on this port
    platform: str = "cpu"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    vllm_command: list[str] = field(default_factory=list)
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 600.0
    fork: bool = True                        # forked from the run's fork server where it has one
    process: subprocess.Popen | Forked | None = None
    name = "vLLM"

    def __post_init__(self) -> None:
        if self.platform not in PLATFORMS:
            raise KvtierError(f"vLLM platform {self.platform!r}: expected one of {', '.join(PLATFORMS)}")
        self.port = self.port or free_port()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        # The `vllm` console script fails under vllm-cpu (it asks package metadata for "vllm"): use the module. On
        # CPU, through kvtier.stack.vllm_cpu_serve: the same server, its engine core forked instead of spawned.
        launcher = list(self.vllm_command) or [sys.executable, "-m", LAUNCH_MODULES.get(self.platform, SERVER_MODULE)]
        cmd = [*launcher, "--model", str(self.model_dir),
               "--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(self.port),
               "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
               # usage.prompt_tokens_details.cached_tokens: the client records how much of a prompt was cached
               "--enable-prompt-tokens-details"]
        if self.enforce_eager:
            cmd.append("--enforce-eager")
        if not self.prefix_caching:
            cmd.append("--no-enable-prefix-caching")
        if self.kv_cache_bytes is not None:
            cmd += ["--kv-cache-memory-bytes", str(int(self.kv_cache_bytes))]
        if self.platform != "cpu":
            cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size),
                    "--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}"]
        if self.lmcache_port is not None:
            cmd += ["--kv-transfer-config", json.dumps({
                "kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector",
                "kv_connector_extra_config": {"lmcache.mp.port": self.lmcache_port}})]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}  # /reset_prefix_cache, the dram tier's eviction
        if self.kv_cache_bytes is not None:
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # on CPU it would override --kv-cache-memory-bytes
        elif self.platform == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_gib:g}"
        if self.platform == "cpu":
            # The model runs in the engine core's own process, as vLLM runs one accelerator (its uniprocess
            # executor), instead of a third spawned Python (about 7 s less per start on 2 cores); with the engine
            # core forked (kvtier.stack.vllm_cpu_serve), each start imports vLLM once. vLLM's CPU platform forces
            # its multiprocess executor unless this is 0; the worker still runs one OpenMP thread (vLLM reduces
            # torch's threads to 1 for serving).
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        return {**env, **self.env}

    def ready(self) -> bool:
        try:
            return bool(web.get_json(f"{self.base_url}/v1/models", timeout_s=2).get("data"))
        except web.ERRORS:
            return False
