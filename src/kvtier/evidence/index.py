"""evidence/index.html (one line per rendered item, linked) and evidence/manifest.json (every item's manifest)."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from .. import __version__
from ..core.atomic import write_text
from ..core.errors import KvtierError
from ..core.hashing import stamp_element
from .catalog import CATALOG
from .render import MANIFEST_NAME

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kvtier evidence</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }}
li {{ margin: 0.4rem 0; }} footer {{ color: #777; font-size: 0.85em; margin-top: 2rem; word-break: break-all; }} code {{ font-size: 0.9em; }} .missing {{ color: #777; }}
</style>
</head>
<body>
<h1>kvtier evidence</h1>
<p>Rendered by <code>kvtier {version}</code> from the raw files in <code>raw_data/</code>.
Each page names the notebook that made it; <a href="manifest.json">manifest.json</a> holds the sha256 of every
input and output.</p>
<h2>Rendered</h2>
<ul>
{rendered}
</ul>
{missing}<footer>package manifest (<a href="package_manifest.json">package_manifest.json</a>, evidence R8) sha256:
{stamp} · check the whole package with <code>kvtier verify</code></footer>
</body>
</html>
"""
# Only where something is missing: a run that built every item has no empty section.
_MISSING = """<h2>Not built by this run</h2>
<ul class="missing">
{items}
</ul>
"""


def build(evidence_dir: str | os.PathLike, items: list[str], not_run: dict[str, str] | None = None) -> Path:
    """Write index.html and manifest.json for `items`, each of which must have been rendered; an item of `not_run`
    (id: why) is listed with the reason this run did not make it (e.g. "not emulated here: ...")."""
    evidence_dir = Path(evidence_dir)
    not_run = dict(not_run or {})
    manifests, rendered, missing = [], [], []
    for entry in CATALOG:
        if entry.id not in items:
            why = f" <i>({html.escape(not_run[entry.id])})</i>" if entry.id in not_run else ""
            missing.append(f"<li><b>{entry.id}</b> — {html.escape(entry.title)}: {html.escape(entry.summary)}{why}"
                           "</li>")
            continue
        if entry.written_after_index:
            rendered.append(f'<li><a href="{entry.page}"><b>{entry.id}</b> — {html.escape(entry.title)}</a> '
                            f"(written after this page): {html.escape(entry.summary)}</li>")
            continue
        page = evidence_dir / entry.page
        manifest = evidence_dir / entry.folder / MANIFEST_NAME
        if not page.is_file() or not manifest.is_file():
            raise KvtierError(f"{page}: item {entry.id} has not been rendered (no page or no {MANIFEST_NAME})")
        manifests.append(json.loads(manifest.read_text(encoding="utf-8")))
        rendered.append(f'<li><a href="{entry.page}"><b>{entry.id}</b> — '
                        f"{html.escape(entry.title)}</a>: {html.escape(entry.summary)}</li>")
    unknown = sorted((set(items) | set(not_run)) - {entry.id for entry in CATALOG})
    if unknown:
        raise KvtierError(f"unknown evidence item(s): {', '.join(unknown)}")
    write_text(evidence_dir / MANIFEST_NAME,
               json.dumps({"tool": f"kvtier {__version__}", "items": manifests}, indent=2, ensure_ascii=False) + "\n")
    return write_text(evidence_dir / "index.html",
                      _PAGE.format(version=__version__, stamp=stamp_element(), rendered="\n".join(rendered),
                                   missing=_MISSING.format(items="\n".join(missing)) if missing else ""))
