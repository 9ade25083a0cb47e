"""Tier names used in config, data and tables (DESIGN.md), in the order tables show them."""

TIERS = ("engine", "dram", "local_disk", "shared_pool", "cross_instance", "recompute")

# What a tier run measures (kvtier.runs.tier_run), in the order a campaign runs them.
TIER_NAMES = ("recompute", "engine", "dram", "local_disk", "shared_pool")
L2_TIERS = ("local_disk", "shared_pool")  # LMCache L2 on a pool directory
CROSS_INSTANCE = "cross_instance"  # R3: the shared pool written by one instance, read by another

# Evidence B's schemes (document 000): the KV cache kept in engine memory, or offloaded (kvtier.runs.boundary).
ENGINE_ONLY, OFFLOAD = "engine_only", "offload"
SCHEMES = (ENGINE_ONLY, OFFLOAD)

LABELS = {
    "recompute": "recompute (no KV store)",
    "engine": "engine prefix cache",
    "dram": "host DRAM (LMCache L1)",
    "local_disk": "local disk (LMCache L2)",
    "shared_pool": "shared pool (LMCache L2)",
    CROSS_INSTANCE: "shared pool, written by another instance (R3)",
}

# Tiers one server start measures one after the other, in this order (`runs.share_servers`): the servers of the
# pair serve both, and the eviction before each resume is what tells them apart. recompute runs on the engine tier's
# vLLM, its prefix cache emptied before every resume; dram on local_disk's LMCache (L1 and L2), its resumes served
# by L1. dram goes first: LMCache's L2 reads do not refill L1, so after local_disk's evictions a dram resume would
# read L2. A vLLM start is ~30 s on 2 cores, several times a tier's measured windows here.
SHARED_SERVERS = (("recompute", "engine"), ("dram", "local_disk"))


def server_units(kinds, share: bool = True) -> list[tuple[str, ...]]:
    """`kinds` grouped by server start, in their order: a SHARED_SERVERS pair where both are there (and `share`),
    each other kind alone."""
    kinds, units, placed = list(kinds), [], set()
    for kind in kinds:
        if kind in placed:
            continue
        pair = next((p for p in SHARED_SERVERS if share and kind in p and all(k in kinds for k in p)), None)
        unit = pair or (kind,)
        units.append(unit)
        placed.update(unit)
    return units
