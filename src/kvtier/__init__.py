"""kvtier: a reproducible evidence package for KV-cache tiering in LLM serving.

The package is grouped by concern, one subpackage per room (docs/ARCHITECTURE.md has the map):

    cli        the one command line, `kvtier`: parses arguments, calls the rooms below, prints
    audit      the claims audit (evidence A): ledger, formulas, rules, verdicts, cross-checks
    gates      the gated joint test G1-G4: verdict records, the gates page
    package    R8, the package itself: its manifest, `kvtier verify`, the reproducible archive
    evidence   readings -> pages: published readings, per-item figures (r1, r2, r2_local, r3), tables, charts,
               notebook rendering, the index, the catalog
    runs       measured runs: one tier's cold-resume run, a campaign's tables, R1's run driver
    bench      the load client (`kvtier bench`)       probes   platform record, storage and page-cache probes
    stack      what serves: vLLM and LMCache server processes, LMCache builds, the generated model
    core       config, errors, atomic writes, hashing, paths, git revision, tier names, HTTP JSON

Imports run one way only: cli -> audit | gates | package -> evidence -> runs -> bench | probes -> stack -> core (bench and probes
never import each other); tests/test_layout.py fails on an import against that order.

The small shared helpers live in one `kvtier.core` subpackage rather than at the top: every module then sits in
a room with a rank, the top level holds only this docstring, the version, the CLI and one import setting (below),
and "core imports nothing else of kvtier" is a rule a test can check.
"""

import sys

__version__ = "0.1.0"

# jsonschema checks the "iri" string formats with rfc3987_syntax when it is installed (jupyterlab pulls it in
# through jupyter-events), and that module compiles a Lark grammar when imported: 3.2 s of every kvtier command and
# every Snakemake start on two cores, measured with `python -X importtime -c "import jsonschema"`. No kvtier schema
# uses those formats; without the module, jsonschema leaves them unchecked. Set before anything imports jsonschema.
sys.modules.setdefault("rfc3987_syntax", None)
