"""The package's layout: every module in a room, imports running one way, and a CLI that the regrouping left as
it was (kvtier/__init__.py and docs/ARCHITECTURE.md describe the rooms)."""

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "src" / "kvtier"
# Rank of each room: a module may import only from rooms of lower rank, and from its own room.
# __main__ -> cli -> audit | gates | package -> evidence -> runs -> bench | probes -> stack -> core (rooms that share a rank
# may not import each other). The top package holds only the version, which every room may read.
RANKS = {"__main__": 8, "cli": 7, "audit": 6, "gates": 6, "package": 6, "evidence": 5, "runs": 4, "bench": 3, "probes": 3, "stack": 2,
         "core": 1, "": 0}


def room_of(module: str) -> str:
    """'kvtier.runs.tier_run' -> 'runs'; 'kvtier' -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, package: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of the package in `path`, module-level or inside a function."""
    name = module_name(path, package)
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == package.name]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != package.name:
                continue
            # `from kvtier import __version__` reads the top package; `from kvtier.x import y` names room x.
            found += [(node.lineno, target if node.module or target.count(".") else f"{target}.{a.name}")
                      for a in node.names] if target == package.name else [(node.lineno, target)]
    return found


def violations(package: Path) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        here = room_of(module_name(path, package))
        if here not in RANKS:
            problems.append(f"{path.relative_to(package.parent)}: module outside every room ({here!r})")
            continue
        for line, target in imported_modules(path, package):
            there = room_of(target)
            if target == f"{package.name}.__version__" or there == "":
                continue
            if there not in RANKS:
                problems.append(f"{path.relative_to(package.parent)}:{line}: imports {target}, in no room")
            elif there != here and RANKS[there] >= RANKS[here]:
                problems.append(f"{path.relative_to(package.parent)}:{line}: {here} imports {target} "
                                f"({there} is not below {here})")
    return problems


def test_imports_run_one_way():
    assert violations(PACKAGE) == []


def test_top_level_holds_only_the_cli_and_the_version():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "cli.py"]
    rooms = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert rooms == sorted(r for r in RANKS if r not in ("cli", "__main__", ""))


@pytest.mark.parametrize("room, statement, expected", [
    ("core", "from ..cli import main\n", "core imports kvtier.cli"),
    ("stack", "from ..runs import tier_run\n", "stack imports kvtier.runs"),
    ("bench", "from ..probes import fio\n", "bench imports kvtier.probes"),  # siblings
    ("probes", "def f():\n    from kvtier.bench import runner\n", "probes imports kvtier.bench"),  # lazy, absolute
    ("evidence", "import kvtier.audit.ledger\n", "evidence imports kvtier.audit.ledger"),
])
def test_an_import_against_the_order_is_caught(tmp_path, room, statement, expected):
    # The check above can fail: the same check on a copy of the package with one planted import.
    import shutil
    copy = tmp_path / "kvtier"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / room / "planted.py").write_text(statement)
    found = violations(copy)
    assert len(found) == 1 and expected in found[0] and "planted.py" in found[0], found


def cli_shape(parser: argparse.ArgumentParser, prefix: str = "") -> dict:
    """Every subcommand (nested ones as "workload profile") with its arguments: names, defaults, types, choices,
    whether required."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    shape = {}
    for name, p in sub.choices.items():
        shape[prefix + name] = [{"options": a.option_strings or [a.dest], "dest": a.dest, "default": a.default,
                                 "nargs": a.nargs, "required": a.required,
                                 "choices": list(a.choices) if a.choices else None,
                                 "type": getattr(a.type, "__name__", None), "action": type(a).__name__}
                                for a in p._actions if not isinstance(a, argparse._HelpAction)]
        if any(isinstance(a, argparse._SubParsersAction) for a in p._actions):
            shape.update(cli_shape(p, f"{prefix}{name} "))
    return shape


def test_the_cli_has_the_subcommands_and_arguments_it_had_before_the_regrouping():
    # tests/golden/cli.json was written from the parser of the flat package (before kvtier.core, .stack, ...);
    # changed on purpose since: `render --html-template` defaults to kvtier's own template and names its choices;
    # `screenshots` was added; `workload profile` and `advise` were added (issue: evidence B); `manifest`, `verify`
    # and `package` (R8); `import` and `compare` (R8: other tools' results); `compare-runs` and `job-times` (the
    # cost of a run and what a rerun says against the shipped pages); `boundary-run --max-rounds --cell-budget-s`
    # (sequential rounds); `gate-g3 --correctness` (the campaign's greedy outputs as G3 lines); `campaign-look` and
    # `gate-g3 --conditions`, `campaign --look` (the campaign's sequential rounds); `boundary-run --sla` (a cell
    # whose SLA verdict is undecided gets more rounds); `emulate` (tiers on loop devices with kernel-capped
    # bandwidth); `sweep-run` (the bandwidth sweep on an emulated tier); `advise --sweep --tier --g2 --prefill-tok-s
    # --kv-bytes-per-token` (predictions for described storage), its `--boundary` no longer required; `index
    # --not-run` (an item this run did not make, with the reason); `gate-g1 --note`.
    from kvtier.cli import build_parser
    golden = json.loads((ROOT / "tests" / "golden" / "cli.json").read_text())
    assert json.loads(json.dumps(cli_shape(build_parser()), default=str)) == golden


def test_the_architecture_map_names_every_room_and_only_files_that_exist():
    import re
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rooms = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    assert all(f"**`kvtier.{room}`**" in text for room in rooms), "one paragraph per room"
    # Every path it names with a folder (a bare file name is one of the room just described) exists, except the
    # pipeline's outputs: a clean clone has none of them (.gitignore keeps them out), so those must be ignored ones.
    named = {t for t in re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|yaml|smk|md|json|ipynb))`", text) if "<" not in t}
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    outputs = [line.strip("/*") + "/" for line in ignored if line.startswith("/") and line.endswith(("/*", "/"))]
    missing = [t for t in named if not (ROOT / t).exists() and not (PACKAGE / t).exists()
               and not t.startswith(tuple(outputs))]
    assert named and missing == [], missing
    rows = text.split("## I want to … → open …", 1)[1].split("\n## ", 1)[0]
    assert len([line for line in rows.splitlines() if line.startswith("| ") and "---" not in line]) - 1 >= 10


def test_importing_jsonschema_after_kvtier_skips_the_iri_grammar():
    # kvtier/__init__.py: rfc3987_syntax compiles a Lark grammar on import, 3 s of every kvtier command and
    # Snakemake start on two cores, for string formats no kvtier schema uses.
    code = "import kvtier, jsonschema, sys; print(sys.modules['rfc3987_syntax'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr
