"""No value of the config reaches a shell unread: every path a rule puts on a command line is quoted.

A hostile or merely unusual path (a space, `;`, `$(...)`, backticks, quotes) must arrive at `kvtier` as the one
argument it is, and outputs must land under its literal name. Braces, which Snakemake reads as wildcards, and
line breaks are refused when the config loads, naming the key.
"""

import json
import shlex
import shutil

import pytest
import yaml

from kvtier.core import config
from kvtier.core.errors import KvtierError
from kvtier.evidence.render import cli_args

from conftest import run

pytestmark = pytest.mark.workflow


def nasty(key: str) -> str:
    """A path that a shell would split, run commands from, and choke on: each command would leave a file."""
    return f"{key} dir;$(touch PWNED-{key})`touch PWNED-bt-{key}`'q\"d"


PATH_KEYS = {  # every key of the config that becomes a path or part of one
    "published_dir": ("published_dir",), "evidence_dir": ("evidence_dir",),
    "served_name": ("model", "served_name"),
    "local_disk_path": ("runs", "local_disk_path"), "shared_pool_path": ("runs", "shared_pool_path"),
}


def nested(settings: dict[tuple[str, ...], object]) -> dict:
    out: dict = {}
    for keys, value in settings.items():
        node = out
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return out


def pwned(project) -> list[str]:
    return sorted(p.name for p in project.rglob("PWNED*"))


def test_the_replay_runs_with_shell_metacharacters_in_every_path(project_copy):
    published, evidence = nasty("published_dir"), nasty("evidence_dir")
    shutil.copytree(project_copy / "raw_data" / "published", project_copy / published)
    (project_copy / "odd.yaml").write_text(yaml.safe_dump(
        {"published_dir": published, "evidence_dir": evidence, "runs": {"enabled": False}, "r1": {"enabled": False},
         "boundary": {"enabled": False}}))
    run(["snakemake", "--cores", "2", "--configfile", "odd.yaml"], cwd=project_copy, timeout=600)
    assert pwned(project_copy) == [], "a config value was run as a command"
    out = project_copy / evidence
    for page in ("R2/R2.html", "R2/R2_table.csv", "audit/audit.html", "audit/verdicts.csv", "index.html"):
        assert (out / page).is_file(), page
    assert not (project_copy / "evidence" / "R2").exists()
    # The render read the published readings from the literal directory too.
    manifest = json.loads((out / "R2" / "manifest.json").read_text())
    assert manifest["made_by"]["parameters"]["published_dir"] == published


def test_every_rule_passes_every_path_as_one_word(project_copy):
    values = {keys: nasty(name) for name, keys in PATH_KEYS.items()}
    shutil.copytree(project_copy / "raw_data" / "published", project_copy / values[("published_dir",)])
    (project_copy / "odd.yaml").write_text(yaml.safe_dump(nested(values)))
    out = run(["snakemake", "-n", "-p", "--cores", "1", "--configfile", "config/presets/test.yaml", "odd.yaml"],
              cwd=project_copy).stdout
    commands = [line.split("Shell command: ", 1)[1] for line in out.splitlines()
                if "Shell command: " in line and not line.endswith("Shell command: None")]  # `all` runs nothing
    assert {shlex.split(c)[1] for c in commands} >= {"render", "tier-run", "r1-reads", "r1-resume", "model",
                                                      "lmcache-build", "campaign", "index", "probe", "gate-g1",
                                                      "g2-storage", "gate-g2", "gate-g3", "gate-proceed", "r9-loads"}
    seen = set()
    for command in commands:
        words = shlex.split(command)  # what sh makes of it: $(...) and backticks inside quotes stay text
        # Its output goes to its log: `> LOG 2>&1` (a gate's, then `|| test -s RECORD`: the record of a FAIL is kept),
        # or `2>&1 | tee LOG` (gate_proceed: its message reaches the terminal too).
        assert words[0] == "kvtier", command
        assert words[words.index(">") + 2] == "2>&1" if ">" in words else words[-4:-1] == ["2>&1", "|", "tee"], command
        for name, value in zip(PATH_KEYS, values.values()):
            # Wherever a value appears, it appears whole inside one word (a JSON setting escapes the quote).
            for word in (w for w in words if f"PWNED-{name})" in w):
                assert value in word or value.replace('"', '\\"') in word, (name, word)
                seen.add(name)
    assert seen == set(PATH_KEYS), "every path key reached some command"
    assert pwned(project_copy) == []


@pytest.mark.parametrize("name", sorted(PATH_KEYS))
def test_a_path_with_braces_is_refused_naming_the_key(name):
    keys = PATH_KEYS[name]
    with pytest.raises(KvtierError, match=rf"key '{'.'.join(keys)}' = .*wildcards"):
        config.validate(nested({keys: "pools/{tier}"}))


def test_render_arguments_are_one_word_per_value():
    argv = cli_args("R2", "notebooks/R2.ipynb", "ev dir/R2", {"published_dir": "a b;$(x)"}, ["in 'put'.csv"])
    assert argv[:5] == ["R2", "--notebook", "notebooks/R2.ipynb", "--out-dir", "ev dir/R2"]
    assert ["--param", "published_dir=a b;$(x)"] == argv[9:11]
    assert argv[-4:] == ["--param", "out_dir=ev dir/R2", "--input", "in 'put'.csv"]
