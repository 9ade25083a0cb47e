"""The evidence catalog (DESIGN.md): one line per item, in the order the index lists them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    id: str
    title: str
    summary: str
    slug: str = ""  # folder and page name under evidence/, when it is not the id

    @property
    def page(self) -> str:
        name = self.slug or self.id
        return f"{name}/{name}.html"

    @property
    def folder(self) -> str:
        return self.slug or self.id


CATALOG = (
    Item("R1", "LMCache parallel-read patch (measured here)", "one fs L2 worker's cold-read bandwidth, upstream vs "
         "patched, beside fio's direct reads per queue depth; checkpoint-save write bandwidth; resume of 12k-token "
         "sessions from L2 against the raw read time of their chunks (published: 0.98 → 5.23 GB/s; "
         "3.26 → 6.40 GB/s)"),
    Item("R2", "Tiered cold resume (published readings)", "TTFT p50 and output tok/s per tier × concurrency "
         "8/16/32, regenerated from the report's raw readings, with the pool's gain over local NVMe and the "
         "speed-up over recompute"),
    Item("R2_local", "Tiered cold resume (measured here)", "TTFT p50 and output tok/s per tier × concurrency "
         "on this machine with real vLLM + LMCache, in the published table's shape, with attribution of every "
         "window and greedy-output correctness against recompute"),
    Item("R3", "Shared pool across instances (measured here)", "instance B (its own vLLM + LMCache) resumes "
         "sessions that instance A wrote to one pool: B's L2 hits, TTFT and tok/s beside the same-instance pool "
         "and recompute, and B's outputs against recompute"),
    Item("R4", "Platform and software stack", "accelerators, ROCm/vLLM/LMCache versions of the published runs"),
    Item("R5", "G4 stability soak", "72 h soak"),
    Item("R6", "G1 arrival acceptance", "inventory against the expected bill of materials"),
    Item("R7", "G2 single-node baseline", "storage bandwidth and recompute baseline"),
    Item("R8", "The package itself", "patches, versions, hashes, manifest"),
    Item("R9", "Model-weight load time per tier", "published: 6.2–9.3× on Atlas 910B"),
    Item("A", "Claims audit", "every numeric claim of both documents, recomputed from the published readings, "
         "with a verdict and cross-checks", slug="audit"),
    Item("B", "Engine memory vs offload boundary", "where engine memory beats offload, by concurrency × context, "
         "under a TTFT SLA"),
)

BY_ID = {item.id: item for item in CATALOG}
