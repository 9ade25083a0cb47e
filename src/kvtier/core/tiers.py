"""Tier names used in config, data and tables (DESIGN.md), in the order tables show them."""

TIERS = ("engine", "dram", "local_disk", "shared_pool", "cross_instance", "recompute")

# What a tier run measures (kvtier.runs.tier_run), in the order a campaign runs them.
TIER_NAMES = ("recompute", "engine", "dram", "local_disk", "shared_pool")
L2_TIERS = ("local_disk", "shared_pool")  # LMCache L2 on a pool directory
CROSS_INSTANCE = "cross_instance"  # R3: the shared pool written by one instance, read by another

LABELS = {
    "recompute": "recompute (no KV store)",
    "engine": "engine prefix cache",
    "dram": "host DRAM (LMCache L1)",
    "local_disk": "local disk (LMCache L2)",
    "shared_pool": "shared pool (LMCache L2)",
    CROSS_INSTANCE: "shared pool, written by another instance (R3)",
}
