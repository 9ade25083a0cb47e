"""kvtier: reproducible evidence for KV-cache tiering in LLM serving."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import KvtierError


def _cmd_config_check(args) -> None:
    from . import config
    cfg = config.load(args.config)
    print(f"{args.config}: valid")
    if args.show:
        print(json.dumps(cfg, indent=2))


def _parse_params(pairs: list[str]) -> dict:
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise KvtierError(f"--param {pair!r}: expected NAME=VALUE with NAME a Python identifier")
        params[name] = _number_or_text(value)
    return params


def _number_or_text(value: str):
    """Papermill parameters keep their type: '2' is the integer 2, '2.5' a float, anything else text."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _cmd_render(args) -> None:
    from . import render
    page = render.render(args.item, args.notebook, args.out_dir, _parse_params(args.param), args.input,
                         cell_timeout_s=args.cell_timeout_s, html_template=args.html_template)
    print(f"{args.item}: rendered {page}")


def _cmd_index(args) -> None:
    from . import index
    print(f"wrote {index.build(args.evidence_dir, args.item)}")


def _cmd_r2(args) -> None:
    from . import r2
    derived = r2.load(args.published_dir)
    print(r2.report_markdown(derived), end="")
    for name, value in r2.headline(derived).items():
        print(f"{name}: {value}")


def _cmd_notebook_sync(args) -> None:
    from . import notebooks
    for py in args.py:
        print(f"wrote {notebooks.sync(py)}")


def _cmd_audit(args) -> None:
    from .audit import crosschecks, ledger, load_tables, report
    from .audit import audit as run_audit
    from .published import R2_SPEC, load_table
    claims = ledger.load(args.claims, args.published_dir)
    local = {"R2": load_table(Path(args.runs) / R2_SPEC.file, R2_SPEC)} if args.runs else None
    results = run_audit(claims, load_tables(args.published_dir), local)
    if args.out_dir:
        for path in report.write(results, crosschecks.all_checks(results), args.out_dir):
            print(f"wrote {path}")
    for verdict, n in report.counts(results).items():
        print(f"{verdict:>13}: {n}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvtier", description=__doc__.splitlines()[0] if __doc__ else None)
    from . import __version__
    parser.add_argument("--version", action="version", version=f"kvtier {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("config", help="validate a workflow config file against its schema")
    p.add_argument("config", help="YAML config file, e.g. config/config.yaml")
    p.add_argument("--show", action="store_true", help="print the config with defaults filled in")
    p.set_defaults(func=_cmd_config_check)

    p = sub.add_parser("render", help="execute an evidence notebook and render it to HTML with a manifest")
    p.add_argument("item", help="evidence item id, e.g. R2")
    p.add_argument("--notebook", required=True, help="the parameterized notebook (.ipynb)")
    p.add_argument("--out-dir", required=True, help="the item's evidence folder")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="papermill parameter (repeatable)")
    p.add_argument("--input", action="append", default=[], metavar="FILE",
                   help="raw input file to hash into the manifest (repeatable)")
    p.add_argument("--cell-timeout-s", type=int, default=600)
    p.add_argument("--html-template", default="lab")
    p.set_defaults(func=_cmd_render)

    p = sub.add_parser("index", help="write evidence/index.html and evidence/manifest.json")
    p.add_argument("--evidence-dir", default="evidence")
    p.add_argument("--item", action="append", default=[], required=True, help="rendered item id (repeatable)")
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser("r2", help="print the published R2 table regenerated from its readings, and the derived figures")
    p.add_argument("--published-dir", default="raw_data/published")
    p.set_defaults(func=_cmd_r2)

    p = sub.add_parser("audit", help="give every registered claim a verdict against the published readings")
    p.add_argument("--claims", default="raw_data/published/claims.yaml", help="the claims ledger")
    p.add_argument("--published-dir", default="raw_data/published", help="published readings and sources/")
    p.add_argument("--out-dir", help="write verdicts.json/.csv and cross_checks.json/.csv here")
    p.add_argument("--runs", metavar="DIR", help="measured readings (R2_readings.csv in DIR): re-evaluate ratio "
                   "claims on them as a local analogue")
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("notebook-sync", help="regenerate NOTEBOOK.ipynb from its jupytext NOTEBOOK.py and "
                       "execute it, keeping the outputs that nbval checks (maintainers)")
    p.add_argument("py", nargs="+", help="notebooks/<item>.py")
    p.set_defaults(func=_cmd_notebook_sync)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except KvtierError as exc:
        print(f"kvtier: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
