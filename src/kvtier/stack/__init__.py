"""What serves: the vLLM and LMCache server processes (`vllm_server`, `lmcache_server`, on `process`, which owns
process groups and ports), the LMCache builds the servers run (`lmcache_build`), and the generated model (`model`).
"""
