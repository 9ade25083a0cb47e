"""Where the project's own files are. kvtier is installed editable from its checkout (see README)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]  # src/kvtier/core/paths.py
SCHEMAS_DIR = REPO_ROOT / "workflow" / "schemas"
PUBLISHED_DIR = REPO_ROOT / "raw_data" / "published"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


def schema_path(name: str) -> Path:
    return SCHEMAS_DIR / f"{name}.schema.yaml"
