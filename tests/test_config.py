import pytest
import yaml

from kvtier.core import config
from kvtier.core.errors import KvtierError

from conftest import ROOT, run


def test_default_config_is_valid_and_complete():
    cfg = config.load(ROOT / "config" / "config.yaml")
    assert cfg["replay"]["items"] == ["R2"]
    assert cfg["render"]["cell_timeout_s"] == 600


def test_defaults_are_filled_from_the_schema():
    cfg = config.validate({})
    assert cfg["published_dir"] == "raw_data/published" and cfg["evidence_dir"] == "evidence"
    assert cfg["replay"] == {"items": ["R2"]} and cfg["audit"] == {"enabled": True}
    assert cfg["render"] == {"cell_timeout_s": 600, "chart_png_scale": 2, "html_template": "kvtier",
                             "beside_measurements": False}
    assert cfg["model"]["path"] == "" and cfg["model"]["generate"]["dtype"] == "float32"
    assert cfg["runs"]["tiers"] == ["recompute", "engine", "dram", "local_disk", "shared_pool"]
    assert cfg["runs"]["concurrency"] == [8, 16, 32]


def test_the_test_preset_is_a_valid_override():
    merged = config.load_yaml(ROOT / "config" / "config.yaml")
    preset = config.load_yaml(ROOT / "config" / "presets" / "test.yaml")
    for section, values in preset.items():
        merged[section] = {**merged.get(section, {}), **values}
    cfg = config.validate(merged)
    assert cfg["runs"]["campaign"] == "test" and cfg["runs"]["sessions"] < 32


@pytest.mark.parametrize("cfg, named", [
    ({"evidnce_dir": "x"}, ["'evidnce_dir'", "top level"]),
    ({"render": {"cell_timout_s": 60}}, ["'cell_timout_s'", "under 'render'"]),
    ({"render": {"cell_timeout_s": "ten"}}, ["render.cell_timeout_s", "'ten'", "integer"]),
    ({"render": {"chart_png_scale": 10}}, ["render.chart_png_scale", "10", "maximum"]),
    ({"render": {"cell_timeout_s": 0}}, ["render.cell_timeout_s", "0", "minimum"]),
    ({"replay": {"items": ["R99"]}}, ["replay.items.0", "'R99'"]),
    ({"replay": "R2"}, ["replay", "'R2'", "object"]),
    ({"audit": {"enabled": "yes"}}, ["audit.enabled", "'yes'", "boolean"]),
    ({"runs": {"tiers": ["vram"]}}, ["runs.tiers.0", "'vram'"]),
    ({"runs": {"concurrency": [0]}}, ["runs.concurrency.0", "0", "minimum"]),
    ({"model": {"generate": {"layrs": 2}}}, ["'layrs'", "under 'model.generate'"]),
])
def test_bad_config_is_refused_naming_key_and_value(cfg, named):
    with pytest.raises(KvtierError) as err:
        config.validate(cfg, source="my.yaml")
    message = str(err.value)
    assert message.startswith("my.yaml: invalid config")
    for fragment in named:
        assert fragment in message


def test_every_problem_is_reported_at_once():
    with pytest.raises(KvtierError) as err:
        config.validate({"evidnce_dir": "x", "render": {"chart_png_scale": 0}})
    assert "evidnce_dir" in str(err.value) and "chart_png_scale" in str(err.value)


def test_cli_refuses_bad_config_with_exit_code_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"render": {"html_templte": "lab"}}))
    proc = run(["kvtier", "config", str(bad)], cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "html_templte" in proc.stderr and str(bad) in proc.stderr


def test_cli_names_a_missing_or_broken_file(tmp_path):
    proc = run(["kvtier", "config", "nowhere.yaml"], cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "nowhere.yaml: file not found" in proc.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("render: [unclosed\n")
    proc = run(["kvtier", "config", str(broken)], cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "not valid YAML" in proc.stderr


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "config" / "examples").glob("*.yaml")))
def test_every_cluster_example_is_a_valid_override_with_a_loadable_bill(example):
    from kvtier.gates import bom
    from kvtier.runs import cluster
    merged = config.load_yaml(ROOT / "config" / "config.yaml")
    for section, values in config.load_yaml(ROOT / "config" / "examples" / example).items():
        merged[section] = {**merged.get(section, {}), **values} if isinstance(values, dict) else values
    cfg = config.validate(merged, source=example)
    bom.load_bill(cfg["gates"]["g1"]["expect"], source=example)
    cluster.check(cfg["cluster"], cfg["runs"]["server"]["platform"], source=example)
    jobs = cluster.job_resources(cfg["cluster"], cfg["runs"]["server"]["platform"],
                                 cfg["runs"]["server"]["tensor_parallel_size"])
    assert jobs["measurement"].get("gpu") == cfg["runs"]["server"]["tensor_parallel_size"]


def test_a_mapping_given_with_snakemake_config_is_typed_as_yaml_types_it():
    retype = config.retype_overrides
    # What Snakemake hands over for `--config soak='{enabled: true, faults: [{at: 20s, kind: kill_vllm}]}'
    # gates='{g4: {failed_budget: 2}}' render=...`: every scalar of a mapping a string (YAML's BaseLoader).
    merged = {"soak": {"enabled": "true", "duration": "10m", "window_s": 60},
              "gates": {"g4": {"failed_budget": "2"}, "enabled": True}}
    args = ["soak={enabled: true, faults: [{at: 20s, kind: kill_vllm}]}", "gates={g4: {failed_budget: 2}}",
            "campaign_note=plain text", "broken={unclosed"]
    merged = retype(merged, args)
    assert merged["soak"] == {"enabled": True, "duration": "10m", "window_s": 60,
                              "faults": [{"at": "20s", "kind": "kill_vllm"}]}
    assert merged["gates"] == {"g4": {"failed_budget": 2}, "enabled": True}
    assert "campaign_note" not in merged and "broken" not in merged  # scalars and unreadable values: as they were
    # `--config measure=false`: Snakemake types numbers but leaves true/false as strings
    assert retype({"measure": "false", "n": 3}, ["measure=false", "n=3"]) == {"measure": False, "n": 3}
