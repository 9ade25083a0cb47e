"""`python -m kvtier.stack.vllm_cpu_serve ARGS`: vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server
ARGS`, unchanged) on vLLM's CPU platform, with its engine core process forked instead of spawned.

Why: vLLM's CPU platform sets VLLM_WORKER_MULTIPROC_METHOD=spawn at every start (vllm/platforms/cpu.py,
`check_and_update_config`), because its multiprocess executor would fork workers after OpenMP is up, which OpenMP
does not survive. kvtier runs the CPU engine with VLLM_ENABLE_V1_MULTIPROCESSING=0 (vLLM's uniprocess executor:
the model runs in the engine core itself, no worker process), so the one child is the engine core, started by the
API server before any OpenMP region has run there. Spawned, that child imports torch and vLLM a second time:
about 8-10 s of each start on 2 cores, serving nothing. Forked, it inherits them (a start took 17.5-22.5 s spawned
and 9.5-10 s forked here, the same greedy output). Where the multiprocess executor is in use
(VLLM_ENABLE_V1_MULTIPROCESSING not 0), nothing is changed: vLLM spawns.

One more change makes a forked core start with a KV connector (--kv-transfer-config, LMCache): the connector's
imports leave llvmlite (through numba) in the API server's modules, which a forked core inherits, and vLLM's scan
of every loaded module for Triton kernels to override (vllm/triton_utils/dispatcher.py, `_rebind_kernels`) calls
`vars(value).get("kernel")` on each attribute that has a `__dict__`. llvmlite's library object answers every
attribute name, `__dict__` included, with a function wrapper, so the scan stopped the engine ("'_lib_fn_wrapper'
object has no attribute 'get'"). The scan's `vars` is given a version that treats a `__dict__` that is not a
mapping as empty: such an object holds no kernel, and every other lookup is vLLM's own.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Mapping

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LAUNCH_MODULE = "kvtier.stack.vllm_cpu_serve"  # this module, as `python -m` names it
METHOD_ENV = "VLLM_WORKER_MULTIPROC_METHOD"
FORK_NOTE = "kvtier.stack.vllm_cpu_serve: the engine core is forked, not spawned"  # once a start, in vLLM's log


def fork_engine_core() -> None:
    """After vLLM's CPU platform has set spawn, set fork again, when no worker process will be made."""
    from vllm.platforms import cpu

    update = cpu.CpuPlatform.check_and_update_config.__func__
    noted: list[bool] = []

    def check_and_update_config(cls, vllm_config) -> None:
        update(cls, vllm_config)
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
            os.environ[METHOD_ENV] = "fork"
            if not noted:  # vLLM checks the configuration more than once a start
                noted.append(True)
                print(FORK_NOTE, file=sys.stderr, flush=True)

    cpu.CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


def instance_dict(value: object) -> Mapping:
    """`vars(value)`, or an empty mapping where the object's `__dict__` is not one (see the module's doc)."""
    namespace = vars(value)
    return namespace if isinstance(namespace, Mapping) else {}


def scan_modules_safely() -> None:
    """The kernel scan in vLLM's dispatcher module looks `vars` up in its globals before the builtins."""
    from vllm.triton_utils import dispatcher

    dispatcher.vars = instance_dict


def main() -> None:
    fork_engine_core()
    scan_modules_safely()
    sys.argv[0] = SERVER_MODULE
    runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
