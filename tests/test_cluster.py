"""What each job asks a cluster scheduler for (kvtier.runs.cluster), from the config's `cluster:` section."""

import pytest

from kvtier.core import config as kvtier_config
from kvtier.core.errors import KvtierError
from kvtier.runs import cluster


def section(**overrides) -> dict:
    """A validated `cluster:` section: the schema's defaults, with overrides."""
    return kvtier_config.validate({"cluster": overrides}, source="test")["cluster"]


def test_on_the_cpu_default_a_measurement_takes_a_whole_node_and_no_accelerator():
    jobs = cluster.job_resources(section(), "cpu", 1)
    assert jobs["measurement"] == {"runtime": 240, "mem_mb": 16000, "cpus_per_task": 2, "slurm_extra": "--exclusive"}
    assert jobs["small"] == {"runtime": 30, "mem_mb": 4000, "cpus_per_task": 1}


def test_partition_account_and_gpus_come_from_the_config():
    jobs = cluster.job_resources(section(partition="gpu", account="proj-1", gpu_model="h100"), "cuda", 8)
    assert jobs["measurement"]["gpu"] == 8 and jobs["measurement"]["gpu_model"] == "h100"
    for kind in cluster.KINDS:
        assert jobs[kind]["slurm_partition"] == "gpu" and jobs[kind]["slurm_account"] == "proj-1"
    assert "gpu" not in jobs["small"]
    assert cluster.job_resources(section(), "npu", 4)["measurement"]["gres"] == "npu:4"
    shared = cluster.job_resources(section(measurement={"exclusive": False}), "rocm", 2)["measurement"]
    assert "slurm_extra" not in shared and shared["gpu"] == 2


def test_a_gpu_model_without_gpus_is_refused_naming_the_key():
    with pytest.raises(KvtierError, match="cluster.gpu_model 'h100'.*platform is 'cpu'"):
        cluster.check(section(gpu_model="h100"), "cpu", source="my.yaml")


@pytest.mark.parametrize("key, value", [("partition", "gpu; rm -rf /"), ("account", "a b"),
                                        ("gpu_model", "h100:2")])
def test_a_name_that_is_not_one_word_is_refused_at_load(key, value):
    with pytest.raises(KvtierError, match=rf"cluster.{key}"):
        section(**{key: value})


def test_a_job_that_runs_for_a_set_time_asks_for_it():
    measurement = cluster.job_resources(section(), "cpu", 1)["measurement"]
    # A 72-hour soak: 72 h + 10 % + 30 min, far over the default 4 hours.
    assert cluster.runtime_for(72 * 3600, measurement)["runtime"] == 72 * 60 * 1.1 + 30
    # A short one keeps the configured runtime, and every other resource is kept.
    short = cluster.runtime_for(170, measurement)
    assert short == measurement
