# Validate the config before any rule is defined: a bad key stops the run here, before anything is written.
import glob
import os
import sys

from kvtier import config as kvtier_config
from kvtier.catalog import BY_ID as CATALOG
from kvtier.errors import KvtierError

# Name every layer of the merged config, so the message points at the file that holds the bad key.
_config_sources = ["config/config.yaml", *map(str, workflow.overwrite_configfiles or [])]
if workflow.config_settings.config:
    _config_sources.append("--config")
try:
    kvtier_config.validate(config, source=" + ".join(_config_sources))
except KvtierError as exc:
    sys.exit(f"kvtier: {exc}")

PUBLISHED = config["published_dir"]
EVIDENCE = config["evidence_dir"]
RENDER = config["render"]
# Evidence items this run builds (catalog ids), and the evidence folder of each.
ITEMS = list(config["replay"]["items"]) + (["A"] if config["audit"]["enabled"] else [])
FOLDERS = [CATALOG[item].folder for item in ITEMS]
SOURCES = sorted(glob.glob(f"{PUBLISHED}/sources/*.txt"))

# The `kvtier render` options every notebook rule shares.
RENDER_FLAGS = f"--cell-timeout-s {RENDER['cell_timeout_s']} --html-template {RENDER['html_template']}"
