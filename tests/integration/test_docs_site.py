"""The docs site as a reader sees it (issue 42): built with ``mkdocs build --strict`` into a scratch
folder, served on loopback and rendered in headless Chromium at a 1280 x 900 window.

Each key page (``PAGES``) must load, show every image it has (a plot that did not load fails), show no
unrendered Sphinx role (``:class:`X```, ``:func:`` ...) in its visible text where ``roles`` is set, and
be no wider than the window (``document.documentElement.scrollWidth <= innerWidth``); on the pages
with ``code_fits`` no code block needs a horizontal scroll bar (the home page's diagram among them).

The browser: playwright's own Chromium when ``python -m playwright install chromium-headless-shell``
could fetch it, else the system's (``RAGCACHE_CHROMIUM``, or ``chromium-headless-shell`` / ``chromium``
on ``PATH``; Debian: ``apt-get install chromium-headless-shell``). Without one the browser tests skip
and say so, unless ``RAGCACHE_REQUIRE_BROWSER=1`` (set by ``.ci/run``), where they fail.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 1280, 900
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|exc|obj|const|ref):`?[~.\w]")
"""A Sphinx role left as text: Markdown renders ``:class:`X``` as ":class:" before a code span, so the
visible text reads ":class:X" (or keeps the backquote where the span did not parse)."""


@dataclass(frozen=True)
class Page:
    """A page to render: its path under the site, whether its visible text is checked for
    unrendered roles, whether every code block must fit the column, and images it must show."""

    name: str
    path: str
    roles: bool = True
    code_fits: bool = False
    images: tuple[str, ...] = ()


def _headline_plots() -> tuple[str, ...]:
    import runpy

    gen = runpy.run_path(str(ROOT / "docs" / "gen_eval.py"), run_name="gen_eval")
    studies = dict.fromkeys(h.study for h in gen["HEADLINES"])
    return tuple(f"{s}.png" for s in studies if gen["plot_of"](s))


PAGES: tuple[Page, ...] = (
    Page("home", "", code_fits=True),
    Page("a guide (the semantic cache, with the guards table)", "guides/semantic-cache/", code_fits=True),
    Page("the evaluation landing page", "evaluation/", images=_headline_plots()),
    Page("a study page", "evaluation/prefix/", images=("prefix.png",)),
    Page("the Python API reference", "reference/api/"),
    Page("install (the Quick start commands)", "getting-started/install/", code_fits=True),
    Page("the demo page", "getting-started/demo/", code_fits=True),
    Page("the prompt-layout guide", "guides/prompt-layout/", code_fits=True),
    Page("the LangChain page", "integrations/langchain/", code_fits=True),
    Page("the local-engine guide", "guides/local-engine/", code_fits=True),
)


# ------------------------------------------------------------------------------------------ the site
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built as CI builds it (``mkdocs build --strict``) into a scratch folder."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def base_url(site: Path) -> Iterator[str]:
    """The built site served over loopback HTTP (as ``mkdocs serve`` or a web server would)."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_site_holds_every_plot_and_no_generator(site: Path):
    """Every study page with a plot embeds it and the image is in the site beside it; the build's
    generator scripts are not published."""
    results = ROOT / "bench" / "results"
    with_plot = sorted(p.stem for p in results.glob("*.json") if (results / f"{p.stem}.png").is_file())
    assert with_plot
    for name in with_plot:
        html = (site / "evaluation" / name / "index.html").read_text(encoding="utf-8")
        assert f'src="../{name}.png"' in html, f"evaluation/{name} does not show its plot"
        assert (site / "evaluation" / f"{name}.png").read_bytes() == (results / f"{name}.png").read_bytes()
    assert not list(site.rglob("gen_*.py")), "the docs generators are copied into the site: exclude_docs"
    assert (site / "evaluation" / "archive" / "index.html").is_file()


# ------------------------------------------------------------------------------------------ the browser
def _chromium() -> str | None:
    """A Chromium binary: ``RAGCACHE_CHROMIUM``, playwright's own build, or the system's."""
    if os.environ.get("RAGCACHE_CHROMIUM"):
        return os.environ["RAGCACHE_CHROMIUM"]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        own = p.chromium.executable_path
    if own and Path(own).is_file():
        return own
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _unavailable(reason: str):
    if os.environ.get("RAGCACHE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (RAGCACHE_REQUIRE_BROWSER=1: this run must render the site)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser_page(base_url: str):
    """A headless Chromium tab at 1280 x 900."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed: pip install -e '.[dev]'")
    exe = _chromium()
    if exe is None:
        _unavailable("no headless Chromium: python -m playwright install chromium-headless-shell, or "
                     "apt-get install chromium-headless-shell, or set RAGCACHE_CHROMIUM to a Chromium binary")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            yield browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        finally:
            browser.close()


_MEASURE = """() => ({
  scrollWidth: document.documentElement.scrollWidth,
  innerWidth: window.innerWidth,
  text: document.body.innerText,
  images: [...document.images].map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0})),
  code: [...document.querySelectorAll('.md-content pre > code')]
    .filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => ({first_line: c.innerText.split('\\n')[0].slice(0, 80), scrollWidth: c.scrollWidth,
                clientWidth: c.clientWidth})),
})"""


@pytest.mark.parametrize("page", PAGES, ids=[p.path or "home" for p in PAGES])
def test_page_renders_for_a_reader(page: Page, base_url: str, browser_page):
    response = browser_page.goto(base_url + page.path, wait_until="load")
    assert response is not None and response.status == 200, f"{page.name}: {page.path} did not load"
    seen = browser_page.evaluate(_MEASURE)
    broken = [i["src"] for i in seen["images"] if not i["ok"]]
    assert not broken, f"{page.name}: broken images {broken}"
    shown = {i["src"].rsplit("/", 1)[-1] for i in seen["images"] if i["ok"]}
    missing = [img for img in page.images if img not in shown]
    assert not missing, f"{page.name}: does not show {missing} (shows {sorted(shown)})"
    if page.roles:
        roles = sorted({m.group(0) for m in ROLE.finditer(seen["text"])})
        assert not roles, f"{page.name}: unrendered roles in the visible text: {roles}"
    assert seen["scrollWidth"] <= seen["innerWidth"], (
        f"{page.name}: the page is {seen['scrollWidth']} px wide in a {seen['innerWidth']} px window")
    if page.code_fits:
        assert not seen["code"], f"{page.name}: code blocks need a horizontal scroll bar at {WIDTH} px: {seen['code']}"


def test_the_role_check_sees_a_role(base_url: str, browser_page, site: Path):
    """The role pattern matches a role as the browser shows it (so the check above can fail)."""
    (site / "role_probe.html").write_text("<p>See :class:`<code>SemanticStats</code>` and :func:<code>x</code>.</p>",
                                          encoding="utf-8")
    browser_page.goto(base_url + "role_probe.html")
    text = browser_page.evaluate("() => document.body.innerText")
    assert {m.group(0) for m in ROLE.finditer(text)} == {":class:`S", ":func:x"}
