"""Tier names used in config, data and tables (DESIGN.md), in the order tables show them."""

TIERS = ("engine", "dram", "local_disk", "shared_pool", "cross_instance", "recompute")

LABELS = {
    "recompute": "recompute (no KV store)",
    "engine": "engine prefix cache",
    "dram": "host DRAM (LMCache L1)",
    "local_disk": "local disk (LMCache L2)",
    "shared_pool": "shared pool (LMCache L2)",
    "cross_instance": "shared pool, written by another instance (R3)",
}
