#!/usr/bin/env python3
"""Platform probe (evidence item R4): record what a run runs on as JSON validated by its schema.

Every tier run calls it (kvtier.runs.tier_run) and writes RUN_DIR/probes/platform.json; run it by hand on a node to
check a cluster before a campaign, e.g.

    python probes/platform_probe.py --out node.json --path shared_pool=/mnt/pool --model-dir models/kvtier-model

The logic is in kvtier.probes.platform_probe (unit tested); this script is the standalone entry point of probes/ and
works from a checkout whether or not kvtier is installed.
"""

import sys
from pathlib import Path

try:
    import kvtier  # noqa: F401
except ImportError:  # a bare checkout: use its sources
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kvtier.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["probe", *sys.argv[1:]]))
