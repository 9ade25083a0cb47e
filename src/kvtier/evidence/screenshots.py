"""Headless Chromium screenshots of the rendered pages: how a reader sees them (code folded, wide tables inside
the page, the report's Chinese quotes drawn and not as empty boxes). A maintainer's check (`make screenshots`),
never a step of the pipeline: pages do not depend on a browser.

Whether Chinese is drawn is measured, not assumed: the same line is shot once in Chinese and once in code points
no font has. Without a CJK font both come out as the same row of boxes, so the two images are identical.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..core.atomic import atomic_path
from ..core.errors import KvtierError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL = "apt-get install chromium fonts-noto-cjk (or `make screenshots`, which does it where it may)"
CJK_SAMPLE = "对比本地单盘吞吐提升"  # from the report's quotes
NO_GLYPH = "\u0378" * len(CJK_SAMPLE)  # an unassigned code point: fonts draw their missing-glyph box


def browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise KvtierError(f"no headless Chromium on PATH (looked for {', '.join(BROWSERS)}); {INSTALL}")


def shoot(page: str | os.PathLike, png: str | os.PathLike, width: int = 1280, height: int = 3000,
          timeout_s: float = 120) -> Path:
    """A screenshot of `page` (a local HTML file) at width x height, written to `png` through a temporary name."""
    page, png = Path(page), Path(png)
    if not page.is_file():
        raise KvtierError(f"{page}: no such page")
    png.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(png) as tmp, tempfile.TemporaryDirectory() as profile:
        cmd = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               f"--user-data-dir={profile}", f"--window-size={width},{height}", f"--screenshot={tmp}",
               page.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not Path(tmp).stat().st_size:
            raise KvtierError(f"{page}: Chromium exited {proc.returncode} without a screenshot: "
                              f"{proc.stderr.strip()[-500:]}")
    return png


def cjk_drawn(work_dir: str | os.PathLike) -> bool:
    """Whether this machine's Chromium draws Chinese with a real font (see the module's docstring)."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    shots = []
    for name, text in (("cjk", CJK_SAMPLE), ("none", NO_GLYPH)):
        html = work_dir / f"{name}.html"
        html.write_text(f'<html><body style="font-size:40px"><p>{text}</p></body></html>', encoding="utf-8")
        shots.append(shoot(html, work_dir / f"{name}.png", width=600, height=120).read_bytes())
    return shots[0] != shots[1]


def pages(evidence_dir: str | os.PathLike) -> list[Path]:
    """The index and every item's page, in the order the index lists folders."""
    evidence_dir = Path(evidence_dir)
    found = sorted(evidence_dir.glob("*/*.html"))
    index = evidence_dir / "index.html"
    return ([index] if index.is_file() else []) + found


def shoot_all(evidence_dir: str | os.PathLike, out_dir: str | os.PathLike) -> tuple[list[Path], bool]:
    """A screenshot of every page under `evidence_dir` into `out_dir` (<folder>_<page>.png), and whether Chinese
    was drawn."""
    listed = pages(evidence_dir)
    if not listed:
        raise KvtierError(f"{evidence_dir}: no rendered page (run `make evidence` first)")
    out_dir = Path(out_dir)
    drawn = cjk_drawn(out_dir / ".font_check")
    shutil.rmtree(out_dir / ".font_check", ignore_errors=True)
    written = [shoot(page, out_dir / f"{page.parent.name}_{page.stem}.png" if page.name != "index.html"
                     else out_dir / "index.png") for page in listed]
    return written, drawn
