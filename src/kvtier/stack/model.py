"""A small Llama model generated locally: random weights from a fixed seed and a BPE tokenizer trained on seeded
text. Nothing comes from a model hub. The default sizes serve a 12k-token prompt in about a second on 2 CPU
cores; float32, because with random bf16 weights near-tied logits flip greedy outputs between two recompute
paths (STACK.md), which would make KV correctness checks meaningless.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.errors import KvtierError

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}\n"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}")
SPEC_FILE = "kvtier-model.json"


@dataclass(frozen=True)
class ModelSpec:
    seed: int = 0
    layers: int = 4
    hidden: int = 256
    intermediate: int = 512
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    vocab: int = 4096
    max_positions: int = 16384
    dtype: str = "float32"

    def check(self) -> None:
        for name, value in asdict(self).items():
            if name not in ("seed", "dtype") and value < 1:
                raise KvtierError(f"model {name} = {value}: must be >= 1")
        if self.heads % self.kv_heads:
            raise KvtierError(f"model heads = {self.heads} must be a multiple of kv_heads = {self.kv_heads}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise KvtierError(f"model dtype {self.dtype!r}: one of float32, bfloat16, float16")
        if self.vocab < 300:
            raise KvtierError(f"model vocab = {self.vocab}: at least 300 (256 byte tokens + merges + specials)")

    @property
    def kv_bytes_per_token(self) -> int:
        width = 4 if self.dtype == "float32" else 2
        return 2 * self.layers * self.kv_heads * self.head_dim * width


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def kv_bytes_per_token(model_dir: str | os.PathLike, dtype: str = "auto") -> int:
    """Bytes of KV one token takes in the engine, from the model's config.json (any Llama-like model): 2 (K and V)
    x layers x KV heads x head size x the width of `dtype` (`auto`: the config's torch_dtype)."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        layers = config["num_hidden_layers"]
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        raise KvtierError(f"{path}: cannot size the KV of one token ({type(exc).__name__}: {exc})") from None
    name = config.get("torch_dtype", "float32") if dtype == "auto" else dtype
    if name not in DTYPE_BYTES:
        raise KvtierError(f"{path}: KV dtype {name!r} unknown (one of {', '.join(DTYPE_BYTES)})")
    return 2 * layers * kv_heads * head_dim * DTYPE_BYTES[name]


def _corpus(seed: int, lines: int = 20000):
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    for _ in range(lines):
        yield " ".join(rng.choice(words) for _ in range(rng.randint(5, 30)))


def generate(out_dir: str | os.PathLike, spec: ModelSpec = ModelSpec()) -> Path:
    """Write the model to `out_dir` (built in a temporary sibling, then renamed: never half-written)."""
    spec.check()
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{out_dir.name}-", dir=out_dir.parent))
    try:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=spec.vocab, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(_corpus(spec.seed), trainer=trainer)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                       pad_token="<pad>")
        fast.chat_template = CHAT_TEMPLATE
        fast.model_max_length = spec.max_positions
        fast.save_pretrained(staging)

        torch.manual_seed(spec.seed)
        config = LlamaConfig(
            vocab_size=len(fast), hidden_size=spec.hidden, intermediate_size=spec.intermediate,
            num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
            head_dim=spec.head_dim, max_position_embeddings=spec.max_positions, rope_theta=10000.0,
            bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
            tie_word_embeddings=False, torch_dtype=spec.dtype)
        LlamaForCausalLM(config).to(getattr(torch, spec.dtype)).save_pretrained(staging, safe_serialization=True)
        (staging / SPEC_FILE).write_text(json.dumps({"spec": asdict(spec), "generator": "kvtier.stack.model"}, indent=2))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def config_hash(model_dir: str | os.PathLike) -> str:
    """sha256 of the model's config.json and tokenizer.json: what identifies a model across runs."""
    digest = hashlib.sha256()
    for name in ("config.json", "tokenizer.json"):
        path = Path(model_dir) / name
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()
