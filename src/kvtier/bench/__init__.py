"""`kvtier bench`: a load client for OpenAI-compatible servers, built to measure long-context cold resumes.

Kept apart as guidellm and aiperf keep them: `http` (one persistent HTTP/1.1 connection, streaming), `backend`
(OpenAI request bodies and SSE parsing into per-request records), `workloads` (what to send), `scheduler` (when
to send it: closed loop or open loop), `records` (requests.jsonl), `metrics` (server /metrics snapshots),
`summary` (statistics), `runner` (a run directory from start to finish).
"""
