"""`python -m kvtier.stack.vllm_cpu_serve ARGS`: vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server
ARGS`, unchanged) on vLLM's CPU platform, with its engine core process forked instead of spawned.

Why: vLLM's CPU platform sets VLLM_WORKER_MULTIPROC_METHOD=spawn at every start (vllm/platforms/cpu.py,
`check_and_update_config`), because its multiprocess executor would fork workers after OpenMP is up, which OpenMP
does not survive. kvtier runs the CPU engine with VLLM_ENABLE_V1_MULTIPROCESSING=0 (vLLM's uniprocess executor:
the model runs in the engine core itself, no worker process), so the one child is the engine core, started by the
API server before any OpenMP region has run there. Spawned, that child imports torch and vLLM a second time:
about 8-10 s of each start on 2 cores, serving nothing. Forked, it inherits them (a start took 17.5-22.5 s spawned
and 9.5-10 s forked here, the same greedy output).

Where the multiprocess executor is in use (VLLM_ENABLE_V1_MULTIPROCESSING not 0), nothing is changed: vLLM spawns.
Nor with a KV connector (--kv-transfer-config, LMCache): the connector's imports leave llvmlite (through numba) in
the API server, and in a forked engine core vLLM's scan of every loaded module for Triton kernels to override
(vllm/triton_utils/dispatcher.py, `_rebind_kernels`) reads `vars()` of llvmlite's library object, whose attribute
lookup answers any name, and stops the engine ("'_lib_fn_wrapper' object has no attribute 'get'"). A spawned core
runs that scan before it imports the connector.
"""

from __future__ import annotations

import os
import runpy
import sys

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
METHOD_ENV = "VLLM_WORKER_MULTIPROC_METHOD"
KV_CONNECTOR_ARG = "--kv-transfer-config"


def fork_engine_core() -> None:
    """After vLLM's CPU platform has set spawn, set fork again, when no worker process will be made."""
    from vllm.platforms import cpu

    update = cpu.CpuPlatform.check_and_update_config.__func__

    def check_and_update_config(cls, vllm_config) -> None:
        update(cls, vllm_config)
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
            os.environ[METHOD_ENV] = "fork"

    cpu.CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


def forks(argv: list[str]) -> bool:
    """Whether this start forks its engine core (see the module's doc): not with a KV connector."""
    return not any(arg == KV_CONNECTOR_ARG or arg.startswith(KV_CONNECTOR_ARG + "=") for arg in argv)


def main() -> None:
    if forks(sys.argv[1:]):
        fork_engine_core()
    sys.argv[0] = SERVER_MODULE
    runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
