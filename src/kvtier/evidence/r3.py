"""R3: the shared pool across instances, measured here (raw_data/runs/<campaign>/cross_instance/).

Instance A (vLLM + its own LMCache server) populates every session and stops; instance B (another vLLM + LMCache
pair on the same pool directory, another job, on another node where the cluster has one) resumes them from what A
left in the pool (kvtier.runs.cross_instance). The published R3 is only the sentence "cross-instance hot sharing
verified"; here it is B's readings in the R2 table's shape, beside the same-instance shared pool and recompute,
with B's attribution (its LMCache's L2 hits, A stopped before B started) and greedy-output correctness against
recompute: the page's tables are kvtier.evidence.measured's (item R3); this module decides whether the sharing
was verified.
"""

from __future__ import annotations

from .measured import Measured


def verdict(shared: Measured) -> dict:
    """Whether B resumed what A wrote: every window valid (B's prefix from L2, A stopped), every output identical."""
    pool = shared.conditions.get("cross_instance", {}).get("pool_after_populate") or {}
    windows = len(shared.attribution)
    valid = int(shared.attribution["valid"].sum())
    identical = bool(len(shared.correctness) and shared.correctness["all_identical"].all())
    return {"windows": windows, "valid_windows": valid, "outputs_identical": identical,
            "l2_hit_tokens": [int(v) for v in shared.attribution["l2_hit_tokens"]],
            "prompt_tokens": [int(v) for v in shared.attribution["prompt_tokens"]],
            "writer_files": pool.get("files"), "writer_bytes": pool.get("bytes"),
            "writer_host": pool.get("writer_host"), "reader_host": pool.get("reader_host"),
            "verified": bool(windows and valid == windows and identical and pool.get("files"))}


def verdict_text(shared: Measured) -> str:
    v = verdict(shared)
    mib = f"{v['writer_bytes'] / 2**20:.1f} MiB" if v["writer_bytes"] else "no bytes"
    hits = ", ".join(f"{h}/{p}" for h, p in zip(v["l2_hit_tokens"], v["prompt_tokens"]))
    # What was shown is reuse of files across instances in turn (A stopped before B started), not the documents'
    # "hot sharing" (A still serving while B reads what it wrote): the word says which.
    head = "SEQUENTIAL SHARING VERIFIED" if v["verified"] else "NOT VERIFIED"
    where = ""
    if v["writer_host"] and v["reader_host"]:
        where = (f" (A on {v['writer_host']}, B on {v['reader_host']}: "
                 f"{'one node' if v['writer_host'] == v['reader_host'] else 'two nodes'})")
    return (f"{head}: instance A wrote {v['writer_files']} chunk files ({mib}) to the pool and stopped; instance B"
            f"{where} resumed "
            f"from them in {v['valid_windows']} of {v['windows']} windows (B's LMCache L2 hit tokens / prompt "
            f"tokens per window: {hits}); B's greedy outputs "
            f"{'equal' if v['outputs_identical'] else 'do NOT all equal'} those of recompute. Hot sharing (A "
            "serving while B reads what it wrote) was not run here.")
