"""The built book in a real browser: headless Chromium (Debian's ``chromium``), driven by Playwright,
reading the published build (the committed chapters, as ``make book`` renders them) from a server
on 127.0.0.1. The quick build's pages are built strictly and read in tests/test_book.py; loading
them here too repeated every page load for pages no reader gets."""

import functools
import http.server
import os
import shutil
import threading
from urllib.parse import urlparse

import pytest

from resid import book

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# CI installs Chromium (.ci/run) and sets this, so there a missing browser fails instead of skipping.
REQUIRED = os.environ.get("RESID_REQUIRE_BROWSER") == "1"
# Chromium's own background traffic (updates, sync, safe browsing) would leave this machine.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps"]  # fmt: skip

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None and not REQUIRED,
        reason="Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)",
    ),
]


@pytest.fixture(scope="module")
def site(committed_book):
    html = committed_book / "_build" / "html"
    handler = functools.partial(QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield html, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM, "Chromium is required here (RESID_REQUIRE_BROWSER=1) but not installed"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def open_page(browser, url: str):
    """A page at ``url`` (in ``browser``, or in a context of it) whose requests to any host but
    this machine are blocked and recorded, and whose failed or missing local requests are
    recorded too."""
    page = browser.new_page()
    page.external, page.failed = [], []

    def route(r):
        host = urlparse(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            page.external.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("requestfailed", lambda request: page.failed.append(request.url))
    page.on("response", lambda response: response.status >= 400 and page.failed.append(response.url))
    page.goto(url, wait_until="networkidle")
    return page


def test_every_page_loads_offline_with_its_images_and_math(site, browser, chapter_pages):
    html, base = site
    pages = sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html"))
    pages = [p for p in pages if not p.startswith(("_static/", "_sources/"))]  # theme templates
    assert len(pages) >= len(book.chapters()) + 3
    loaded = {f"chapters/{name}.html": page for name, page in chapter_pages.items()}  # loaded once
    with_math = 0
    for path in pages:
        page = loaded.get(path) or open_page(browser, f"{base}/{path}")
        assert not page.external, f"{path} asked for {page.external}"
        assert not page.failed, f"{path}: {page.failed}"
        images = page.eval_on_selector_all(
            "img", "els => els.map(e => [e.currentSrc, e.complete, e.naturalWidth])"
        )
        broken = [src for src, complete, width in images if not complete or width == 0]
        assert not broken, f"{path}: images that did not load: {broken}"
        if page.locator(".math").count():
            page.wait_for_selector("mjx-container", timeout=15_000)
            with_math += 1
        if path not in loaded:  # the shared chapter pages stay open for the tests below
            page.close()
    assert with_math >= 3  # the privileged-basis chapters are full of formulas


def test_search_finds_a_chapter_by_a_word_in_it(site, browser):
    _, base = site
    page = open_page(browser, f"{base}/search.html?q=kurtosis")
    page.wait_for_selector("ul.search li a", timeout=20_000)
    hits = page.eval_on_selector_all("ul.search li a", "els => els.map(e => e.getAttribute('href'))")
    assert any("chapters/kurtosis" in h for h in hits), hits
    page.close()


def test_a_results_row_leads_to_its_chapters_claims_table(site, browser):
    _, base = site
    page = open_page(browser, f"{base}/chapters/results.html")
    page.click("a[href='rmsnorm.html#claims-rmsnorm']")
    page.wait_for_load_state("networkidle")
    assert page.url.endswith("chapters/rmsnorm.html#claims-rmsnorm"), page.url
    heading = page.locator("section:has(> #claims-rmsnorm) > h2")
    assert "claims" in heading.inner_text() and heading.is_visible()
    assert page.locator("section:has(> #claims-rmsnorm) table").count() == 1
    page.close()


def test_a_solution_stays_hidden_until_its_toggle_is_clicked(site, browser):
    _, base = site
    page = open_page(browser, f"{base}/chapters/kurtosis.html")
    solution = page.locator(".tag_solution").first
    code = solution.locator(".cell_input")
    assert solution.locator("summary").inner_text().strip().startswith("Show the solution")
    assert not code.is_visible()
    solution.locator("summary").click()
    assert code.is_visible()
    # a solution verifies itself: an assert, or a check that fails the chapter when it fails
    assert any(verifies in code.inner_text() for verifies in ("assert", "claims.check(", "ledger.check("))
    page.close()


def committed() -> list[str]:
    return [n for n in book.chapters() if (book.CHAPTERS_OUT / f"{n}.ipynb").exists()]


@pytest.fixture(scope="module")
def chapter_pages(site, browser):
    """Every committed chapter's page, loaded once at a laptop's viewport and shared by the tests
    below (each leaves its page as it found it): loading them is most of these tests' time."""
    assert committed(), "no executed chapter is committed"
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    _, base = site
    pages = {name: open_page(context, f"{base}/chapters/{name}.html") for name in committed()}
    yield pages
    context.close()


def test_parameters_setup_and_plotting_code_are_collapsed_and_the_figures_shown(chapter_pages):
    for name, page in chapter_pages.items():
        collapsed = page.locator(".tag_parameters, .tag_injected-parameters, .tag_setup, .tag_plot")
        assert collapsed.count() >= 2, name
        for i in range(collapsed.count()):
            cell = collapsed.nth(i)
            assert cell.locator("summary").first.inner_text().strip().startswith("Show the"), name
            assert not cell.locator(".cell_input").is_visible(), f"{name}: a collapsed cell's code shows"
        figures = page.locator(".tag_plot .cell_output img")
        assert all(figures.nth(i).is_visible() for i in range(figures.count())), name


def test_check_tables_stay_folded_until_their_toggle_is_clicked(chapter_pages):
    """A check table answers some exercises: on the published pages it shows only when asked."""
    for name, page in chapter_pages.items():
        checks = page.locator(".tag_checks")
        assert checks.count() == 1, name
        output = checks.locator(".cell_output")
        assert checks.locator("summary").first.inner_text().strip().startswith("Show the checks"), name
        assert not output.is_visible(), f"{name}: its check table shows before it is asked for"
        checks.locator("summary").first.click()
        assert output.is_visible(), name
        checks.locator("summary").first.click()  # folded again, as the other tests expect it
        assert not output.is_visible(), name


# Matplotlib draws 10-point text 14 px high at its 100 dpi; shrunk below 0.6 of its size, such
# text is under 8 px on screen.
LEGIBLE_SCALE = 0.6


def test_no_figure_is_shrunk_below_a_legible_size(chapter_pages):
    for name, page in chapter_pages.items():
        sizes = page.eval_on_selector_all(
            ".cell_output img", "els => els.map(e => [e.clientWidth, e.naturalWidth])"
        )
        shown = [(w, n) for w, n in sizes if w > 0]  # solutions' figures stay folded
        assert shown, f"{name} shows no figure"
        small = [(w, n) for w, n in shown if w / n < LEGIBLE_SCALE]
        assert not small, f"{name}: figures shown at {[f'{w}/{n} px' for w, n in small]}"


# Chapters whose committed execution wrote to stderr and that wait for their re-execution: none
# since Rotations and Adam were re-executed from their records; none may join it.
STDERR_AWAITING_EXECUTION: set[str] = set()
# What a page's text may not hold once math and code are set aside: a "$" that MathJax never saw.
TEXT_OUTSIDE_CODE_AND_MATH = """article => {
    const copy = article.cloneNode(true);
    const set_aside = "pre, code, .math, mjx-container, script, style, .cell_input";
    copy.querySelectorAll(set_aside).forEach(e => e.remove());
    return copy.textContent;
}"""


def test_pages_read_like_a_book(chapter_pages):
    """No stderr block; every figure has alt text that says what it shows; no "$" left raw in the
    text; no table wider than the text column."""
    for name, page in chapter_pages.items():
        if name not in STDERR_AWAITING_EXECUTION:
            assert page.locator(".output.stderr").count() == 0, f"{name} shows stderr"
        alts = page.eval_on_selector_all(".cell_output img", "els => els.map(e => e.getAttribute('alt'))")
        alts = [alt or "" for alt in alts]
        mute = [alt for alt in alts if len(alt.split()) < 6 or alt.endswith((".png", ".svg", ".jpg"))]
        assert alts and not mute, f"{name}: figures without alt text saying what they show: {mute}"
        text = page.eval_on_selector("article", TEXT_OUTSIDE_CODE_AND_MATH)
        where = text.find("$")
        assert where < 0, f"{name}: raw $ in {text[max(0, where - 60) : where + 60]!r}"
        assert not tables_wider_than_the_text(page), f"{name}: {tables_wider_than_the_text(page)}"


# A table's width: its box, and what it holds (a table that scrolls sideways inside the column
# hides its last columns, the verdict among them, as surely as one that overflows).
TABLE_WIDTHS = """els => els.map(e => [Math.max(e.getBoundingClientRect().width, e.scrollWidth),
                                     e.closest('article').clientWidth])"""


def tables_wider_than_the_text(page) -> list[str]:
    widths = page.eval_on_selector_all("article table", TABLE_WIDTHS)
    return [
        f"a table {round(w)} px wide in a {round(column)} px column" for w, column in widths if w > column + 1
    ]


def test_the_results_page_fits_the_text_column_with_each_verdict_in_sight(site, browser):
    _, base = site
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = open_page(context, f"{base}/chapters/results.html")
    assert page.locator("article table").count() >= 4
    assert not tables_wider_than_the_text(page), tables_wider_than_the_text(page)
    headers = page.eval_on_selector_all("article table thead tr", "els => els.map(e => e.innerText)")
    assert sum("verdict" in h and "registered" in h for h in headers) >= 3, headers
    context.close()


def test_every_opening_box_starts_with_its_result(chapter_pages):
    for name, page in chapter_pages.items():
        box = page.locator("article .admonition").first
        first = box.locator("p:not(.admonition-title)").first.inner_text().strip()
        assert first.startswith("Result:") and len(first.split()) > 8, f"{name}: its box opens {first[:80]!r}"
        assert "rerun" in box.locator(".admonition-title").inner_text().lower(), name
