"""Attribution rules and the R2_local tables, on synthetic windows and on a real campaign's tables."""

import pytest

from conftest import ROOT
from kvtier import r2_local
from kvtier.campaign import attribution


def window(prompt=4160, failed=0, **sources):
    vllm = {f'vllm:prompt_tokens_by_source_total{{engine="0",source="{k}"}}': v for k, v in sources.items()
            if k in ("local_compute", "local_cache_hit", "external_kv_transfer")}
    lmcache = {f"lmcache_mp_lookup_hit_{k}_tokens_total{{model_name=\"m\"}}": v for k, v in sources.items()
               if k in ("l1", "l2")}
    return {"concurrency": 2, "prompt_tokens": prompt, "requests": {"failed": failed},
            "server_metrics": {"vllm": {"deltas": vllm}, "lmcache": {"deltas": lmcache}}}


@pytest.mark.parametrize("tier, sources, valid", [
    ("recompute", dict(local_compute=4160), True),
    ("recompute", dict(local_compute=64, local_cache_hit=4096), False),        # the prefix cache was on
    ("engine", dict(local_compute=64, local_cache_hit=4096), True),
    ("engine", dict(local_compute=4160), False),                                # nothing was cached
    ("dram", dict(local_compute=64, external_kv_transfer=4096, l1=4096), True),
    ("dram", dict(local_compute=64, external_kv_transfer=4096, l1=4096, l2=4096), False),  # L2 served it
    ("dram", dict(local_compute=64, local_cache_hit=4096), False),             # the engine served it
    ("local_disk", dict(local_compute=64, external_kv_transfer=4096, l2=4096), True),
    ("local_disk", dict(local_compute=64, external_kv_transfer=4096, l1=4096), False),     # L1 was not emptied
    ("shared_pool", dict(local_compute=4160), False),
])
def test_a_window_counts_only_when_the_tier_under_test_served_the_prefix(tier, sources, valid):
    assert attribution(tier, window(**sources))["valid"] is valid


def test_a_window_with_failed_requests_is_invalid():
    row = attribution("dram", window(failed=1, local_compute=64, external_kv_transfer=4096, l1=4096))
    assert row["valid"] is False and "1 request(s) failed" in row["rule"]


def test_r2_local_tables_from_a_real_campaign():
    local = r2_local.load(ROOT / "tests" / "fixtures" / "campaign")
    assert set(local.vs_recompute["tier"]) == {"engine", "dram", "local_disk", "shared_pool"}
    speedup = local.vs_recompute.set_index(["tier", "concurrency"])["ttft_p50_speedup"]
    assert (speedup > 1).all(), "every cached tier beats recompute on TTFT"
    assert "same device" in r2_local.conditions_markdown(local)


def test_a_tier_run_without_a_model_is_refused_before_any_server_starts(tmp_path):
    from kvtier.errors import KvtierError
    from kvtier.tierrun import TierSettings, run_tier
    with pytest.raises(KvtierError, match="no config.json there"):
        run_tier("dram", TierSettings(model_dir=str(tmp_path / "nope")), tmp_path / "run")
    with pytest.raises(KvtierError, match="unknown tier 'vram'"):
        run_tier("vram", TierSettings(model_dir=str(tmp_path)), tmp_path / "run")
    assert not (tmp_path / "run").exists()
