"""kvtier: a reproducible evidence package for KV-cache tiering in LLM serving."""

__version__ = "0.1.0"
