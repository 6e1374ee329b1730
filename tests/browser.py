"""Headless Chromium for the tests: load a page from disk, read what its script reported, take screenshots.

Only the Debian ``chromium`` binary is used (``.ci/run`` installs it): no driver,
no download, no server. Pages are opened as ``file://`` URLs; a page reports on
itself by filling ``<pre id="media-status">`` with JSON, read back from
``--dump-dom``.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO_ROOT / "artifacts"  # git-ignored; CI keeps what lands here

_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
    "--no-first-run", "--no-default-browser-check", "--mute-audio", "--allow-file-access-from-files",
]

# Reports, for every <img>, whether it decoded and its natural size (what the file really holds).
_IMAGE_SCRIPT = """
(function () {
  var images = Array.prototype.slice.call(document.querySelectorAll("img"));
  var state = images.map(function () { return null; });
  var status = document.getElementById("media-status");
  function report() {
    var done = state.filter(function (s) { return s !== null; }).length;
    status.textContent = JSON.stringify({images: images.length, decoded: state.filter(function (s) { return s === "ok"; }).length,
      broken: state.filter(function (s) { return s === "error"; }).length,
      sizes: images.map(function (img) { return {src: img.getAttribute("src"), complete: img.complete,
                                                  width: img.naturalWidth, height: img.naturalHeight}; })});
    if (done === images.length) { status.setAttribute("data-complete", "true"); }
  }
  images.forEach(function (img, i) {
    function settle(value) { if (state[i] === null) { state[i] = value; report(); } }
    function decode() {
      img.decode().then(function () { settle("ok"); }, function () { settle("error"); });
      // Headless Chromium under load can leave decode() pending past the dump while the image is loaded with
      // its natural size; the screenshot check then looks at the pixels themselves.
      setTimeout(function () { if (img.complete && img.naturalWidth > 0) { settle("ok"); } }, 3000);
    }
    if (img.complete) { decode(); } else { img.addEventListener("load", decode); }
    img.addEventListener("error", function () { settle("error"); });
  });
  report();
})();
"""


def chromium_or_skip() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("Chromium is required in CI (.ci/run installs the Debian package 'chromium').")
    pytest.skip("Chromium is not installed; `apt-get install -y chromium` to run the browser test.")


def headless(chromium: str, profile: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs Chromium once (it exits when the page is done); its own profile folder, nothing shared."""
    command = [chromium, *_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def page_status(chromium: str, page: Path, profile: Path, *, attempts: int = 3) -> dict:
    """Loads ``page`` from disk and returns the JSON its script wrote into ``#media-status``.

    On a busy machine headless Chromium can dump the page before a ``file://``
    image has finished loading (the script then reports it neither decoded nor
    broken). Only that case is retried, at most ``attempts`` times, each with a
    fresh profile; an image that fails to decode is reported at once.
    """
    for attempt in range(attempts):
        run_profile = profile.with_name(f"{profile.name}-{attempt}")
        dump = headless(chromium, run_profile, "--virtual-time-budget=30000", "--dump-dom", page.resolve().as_uri())
        assert dump.returncode == 0, dump.stderr[-3000:]
        match = re.search(r'<pre id="media-status"([^>]*)>(.*?)</pre>', dump.stdout, re.S)
        assert match, dump.stdout[-2000:]
        if 'data-complete="true"' in match.group(1):
            return json.loads(html.unescape(match.group(2)))
    raise AssertionError(f"{page.name}: media still loading after {attempts} attempts: {match.group(2)[:2000]}")


def image_page(folder: Path, images: list[Path], title: str = "images") -> Path:
    """A page showing ``images`` at their natural size, reporting how each decoded."""
    tags = "\n".join(f'<p><img src="{p.resolve().as_uri()}" alt="{html.escape(p.name)}"></p>' for p in images)
    page = folder / f"{title}.html"
    page.write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f'<style>body {{ margin: 0; background: white; }} p {{ margin: 0; }}</style></head><body>{tags}'
        f'<pre id="media-status">waiting</pre><script>{_IMAGE_SCRIPT}</script></body></html>',
        encoding="utf-8",
    )
    return page


def screenshot(chromium: str, page: Path, profile: Path, out: Path, *, width: int, height: int) -> Path:
    """Screenshots ``page`` at ``width`` x ``height``; checks the PNG decodes to that size and is not blank.

    A copy goes to ``artifacts/`` (git-ignored) so CI can keep it.
    """
    from PIL import Image, ImageStat

    out.unlink(missing_ok=True)
    snap = headless(chromium, profile, "--virtual-time-budget=10000", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--screenshot={out}", page.resolve().as_uri())
    assert snap.returncode == 0, snap.stderr[-3000:]
    with Image.open(out) as img:
        img.load()  # decodes every pixel: a truncated PNG fails here
        assert img.size == (width, height), img.size
        spread = ImageStat.Stat(img.convert("L")).stddev[0]
    assert spread > 5, f"the screenshot {out} is (nearly) one colour"
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(out, ARTIFACTS / out.name)
    return out


def assert_decoded(status: dict, expected: dict[str, tuple[int, int]]) -> None:
    """Every image decoded, and each ``src`` ending in a key of ``expected`` has that (width, height)."""
    assert status["images"] == len(expected) and status["decoded"] == len(expected), status
    assert status["broken"] == 0, status
    for entry in status["sizes"]:
        [key] = [k for k in expected if entry["src"].endswith(k)]
        assert entry["complete"] and (entry["width"], entry["height"]) == expected[key], entry
