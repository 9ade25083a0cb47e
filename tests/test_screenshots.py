"""`kvtier screenshots`: real headless Chromium on a page rendered with kvtier's template (`make test` installs
Chromium and a CJK font where it may: as root, or with sudo)."""

import os
import shutil
import subprocess

import pytest
from test_render import make_notebook

from kvtier.core.errors import KvtierError
from kvtier.evidence import render, screenshots

from conftest import run

CHROMIUM = next((b for b in screenshots.BROWSERS if shutil.which(b)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium on PATH (`make test` installs "
                                                              "it as root; or apt-get install chromium)")


def fontconfig_has_chinese() -> bool:
    if not shutil.which("fc-list"):
        return False
    return bool(subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout.strip())


@needs_chromium
def test_a_rendered_page_is_shot_and_chinese_is_drawn_where_a_cjk_font_is_installed(tmp_path):
    nb = make_notebook(tmp_path / "X.ipynb", f"print({screenshots.CJK_SAMPLE!r})")
    evidence = tmp_path / "evidence"
    render.render("X", nb, evidence / "X", {"out_dir": ""}, [], cwd=tmp_path)
    written, drawn = screenshots.shoot_all(evidence, tmp_path / "shots")
    assert [p.name for p in written] == ["X_X.png"]
    png = written[0].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 1280  # width from the IHDR
    # The detector agrees with fontconfig; where `make test` could install the font (root), it must be there.
    assert drawn is fontconfig_has_chinese()
    if os.geteuid() == 0:
        assert drawn, "make test installs fonts-noto-cjk as root"
    assert not (tmp_path / "shots" / ".font_check").exists()


def test_screenshots_name_what_is_missing(tmp_path, monkeypatch):
    proc = run(["kvtier", "screenshots", "--evidence-dir", str(tmp_path / "none")], cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "none: no rendered page (run `make evidence` first)" in proc.stderr
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KvtierError, match="no headless Chromium on PATH.*fonts-noto-cjk"):
        screenshots.browser()
