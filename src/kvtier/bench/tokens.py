"""Token ids for synthetic prompts, counted with the served model's own tokenizer (the server's /tokenize)."""

from __future__ import annotations

import random
import urllib.error

from ..core import web
from ..core.errors import KvtierError

SYLLABLES = ("ka", "lo", "mi", "ren", "sa", "tu", "vel", "no", "qui", "dor", "pa", "zen", "ri", "fo", "gal",
             "be", "wyn", "ix", "ol", "tam")


def words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(count))


class ServerTokenizer:
    """/tokenize and /detokenize of a vLLM server (the served model's tokenizer, whatever it is)."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 60.0):
        self.base_url, self.model, self.timeout_s = base_url.rstrip("/"), model, timeout_s

    def _post(self, path: str, payload: dict) -> dict:
        try:
            return web.post_json(f"{self.base_url}{path}", payload, timeout_s=self.timeout_s)
        except urllib.error.HTTPError as exc:
            raise KvtierError(f"{self.base_url}{path}: HTTP {exc.code}: {exc.read()[:300]!r}") from None
        except web.ERRORS as exc:
            raise KvtierError(f"{self.base_url}{path}: {exc}") from None

    def encode(self, text: str) -> list[int]:
        return self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})["tokens"]

    def decode(self, ids: list[int]) -> str:
        return self._post("/detokenize", {"model": self.model, "tokens": ids})["prompt"]


def alphabet(tokenizer, seed: int, sample_words: int = 4000) -> list[int]:
    """Ordinary (non-special) token ids of the served model, to draw synthetic prompts from."""
    ids = sorted(set(tokenizer.encode(words(sample_words, seed))))
    if len(ids) < 16:
        raise KvtierError(f"the served tokenizer yields only {len(ids)} distinct tokens for plain text")
    return ids


def sequence(rng: random.Random, ids: list[int], length: int) -> list[int]:
    return [rng.choice(ids) for _ in range(length)]
