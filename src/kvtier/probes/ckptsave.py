"""R1 probe: checkpoint-save write bandwidth of a LoRA-sized sharded state dict, written with fsync.

The published figure is an 8-GPU LoRA checkpoint of a 32B model (3.26 → 6.40 GB/s). The default spec is the
LoRA adapter (rank 16 on every attention and MLP projection) of a 32B-class layout (64 layers, hidden 5120,
MLP 27648, 1024-wide K/V), bfloat16, in 8 safetensors shards of contiguous layers: 134 M parameters, 268 MB.
Two writers are timed, the same bytes each: `one_writer` saves the shards one after another (one process saving
the whole checkpoint), `parallel_writers` saves every shard at once on its own thread (one writer per rank).
A save counts from the first serialization to the last fsync; the files are removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.errors import KvtierError

WRITERS = ("one_writer", "parallel_writers")
DIR_NAME = "kvtier-r1-checkpoint"
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class CheckpointSpec:
    layers: int = 64
    hidden: int = 5120
    intermediate: int = 27648
    kv_dim: int = 1024
    rank: int = 16
    shards: int = 8
    dtype: str = "bfloat16"

    def __post_init__(self):
        for name, value in asdict(self).items():
            if name != "dtype" and (not isinstance(value, int) or value < 1):
                raise KvtierError(f"checkpoint spec: {name} must be a positive integer, not {value!r}")
        if self.shards > self.layers:
            raise KvtierError(f"checkpoint spec: {self.shards} shards for {self.layers} layers")
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise KvtierError(f"checkpoint spec: dtype {self.dtype!r} (bfloat16, float16 or float32)")

    def projection_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each projection of one layer."""
        h, m, kv = self.hidden, self.intermediate, self.kv_dim
        return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
                "gate_proj": (h, m), "up_proj": (h, m), "down_proj": (m, h)}

    def parameters(self) -> int:
        return self.layers * self.rank * sum(i + o for i, o in self.projection_shapes().values())

    def bytes(self) -> int:
        return self.parameters() * {"bfloat16": 2, "float16": 2, "float32": 4}[self.dtype]


def state_dict_shards(spec: CheckpointSpec, seed: int = 0) -> list[dict]:
    """The adapter's tensors (random values: nothing compresses them away), split into `spec.shards` dicts of
    contiguous layers, with PEFT's names."""
    import numpy as np
    import torch

    dtype = getattr(torch, spec.dtype)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    rng = np.random.default_rng(seed)

    def tensor(*shape: int):  # random bit patterns: fast, and nothing compresses them away
        data = bytearray(rng.bytes(shape[0] * shape[1] * itemsize))
        return torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)

    shapes = spec.projection_shapes()
    bounds = [round(i * spec.layers / spec.shards) for i in range(spec.shards + 1)]
    shards = []
    for lo, hi in zip(bounds, bounds[1:]):
        shard = {}
        for layer in range(lo, hi):
            for proj in _PROJECTIONS:
                block = "self_attn" if proj in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
                fan_in, fan_out = shapes[proj]
                prefix = f"base_model.model.model.layers.{layer}.{block}.{proj}"
                shard[f"{prefix}.lora_A.weight"] = tensor(spec.rank, fan_in)
                shard[f"{prefix}.lora_B.weight"] = tensor(fan_out, spec.rank)
        shards.append(shard)
    return shards


def _save(shard: dict, path: Path) -> int:
    from safetensors.torch import save

    data = save(shard)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return len(data)


def save(shards: list[dict], directory: str | os.PathLike, writer: str) -> dict:
    """Time one save of every shard into `directory`/kvtier-r1-checkpoint with `writer`; the files are removed
    afterwards (they are not part of the record)."""
    if writer not in WRITERS:
        raise KvtierError(f"unknown checkpoint writer {writer!r} (writers: {', '.join(WRITERS)})")
    target = Path(directory) / DIR_NAME
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    paths = [target / f"adapter-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    try:
        start = time.perf_counter()
        if writer == "one_writer":
            written = [_save(shard, path) for shard, path in zip(shards, paths)]
        else:
            with ThreadPoolExecutor(max_workers=len(shards)) as pool:
                written = list(pool.map(_save, shards, paths))
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)  # the directory entries too
        finally:
            os.close(fd)
        seconds = time.perf_counter() - start
    finally:
        shutil.rmtree(target, ignore_errors=True)
    total = sum(written)
    return {"writer": writer, "shards": len(shards), "bytes": total, "seconds": seconds,
            "gb_per_s": total / seconds / 1e9, "fsync": True, "format": "safetensors"}
