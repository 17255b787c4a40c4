import atexit
import os
import shutil
import tempfile

import pytest
import torch

# Tests never use what an earlier run or session cached, and never wait on the network.
os.environ["RESID_CACHE"] = tempfile.mkdtemp(prefix="resid-test-cache-")
# its converted models are 2.4 GB: gone with the session, as its runs and caches are
atexit.register(shutil.rmtree, os.environ["RESID_CACHE"], ignore_errors=True)
os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def smollm2():
    import resid

    return resid.load("smollm2-135m")


def render(site) -> None:
    """The results page and the HTML of a book folder, warnings counted as errors."""
    from resid import book
    from resid.book.course import course_page

    book.results_page(site / "chapters", toc=site / "_toc.yml")
    course_page(site / "chapters")
    book.write_handouts(site / "handouts", executed=site / "chapters")
    book.build_html(site, strict=True)


# A chapter's quick run takes its defaults but for quick=True, and these per-chapter overrides.
# (The painters chapter's dtype defaults to "auto": float32 on a CPU without bf16 matrix units,
# where bf16 runs several times slower, and bfloat16 where it is faster; tests/test_tasks.py
# checks the bfloat16 readout on a tiny model.)
QUICK_OVERRIDES: dict[str, dict] = {}
QUICK_WORKERS = int(os.environ.get("RESID_TEST_WORKERS", min(2, os.cpu_count() or 1)))


# The quick book's chapters start executing as soon as the tests are collected, two at a time in
# processes of their own, while the tests that need no book run beside them in this one (a third
# runnable thread on two cores: the tests alone use about one); the tests that read the quick
# book run last. Run one after the other, the two took about 300 s more on 2 cores.
_quick_run: dict = {}


def pytest_collection_modifyitems(session, config, items) -> None:
    readers = [item for item in items if "quick_book" in getattr(item, "fixturenames", ())]
    if not readers or config.getoption("collectonly"):
        return
    items[:] = [item for item in items if item not in readers] + readers
    _start_quick_book(config)


def _start_quick_book(config) -> None:
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from resid import book

    root = Path(__file__).resolve().parents[1]
    site = config._tmp_path_factory.mktemp("quick-book") / "book"  # the session's, kept as pytest keeps them
    shutil.copytree(root / "book", site, ignore=shutil.ignore_patterns("_build", "chapters"))
    runs = {name: {"quick": True, **QUICK_OVERRIDES.get(name, {})} for name in book.chapters()}
    torch.set_num_threads(1)  # the chapters' kernels hold a core each; this process shares them
    executor = ThreadPoolExecutor(1, thread_name_prefix="quick-book")
    _quick_run.update(site=site, executor=executor, future=executor.submit(
        book.run_chapters, runs, out_dir=site / "chapters", workers=QUICK_WORKERS))  # fmt: skip


def pytest_unconfigure(config) -> None:
    """An interrupted session stops the chapters still running instead of waiting for them."""
    future = _quick_run.get("future")
    if future is not None and not future.done():
        import multiprocessing

        for child in multiprocessing.active_children():
            child.terminate()
        _quick_run["executor"].shutdown(wait=False, cancel_futures=True)


@pytest.fixture(scope="session")
def quick_book(request):
    """The book with every chapter executed in quick mode, its results page, and its HTML:
    the site a reader's browser gets (``<site>/_build/html``)."""
    if not _quick_run:  # collected without its readers (a -k run, say): it runs now
        _start_quick_book(request.config)
    _quick_run["future"].result()  # a chapter's failure raises its ChapterError here
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    site = _quick_run["site"]
    render(site)
    return site


PUBLISHED_FROM = "https://github.com/resid-book/resid"  # stands in for ${{ github.repository }}


@pytest.fixture(scope="session")
def committed_book(tmp_path_factory):
    """The published book: the executed chapters committed in book/chapters, rendered as
    ``make book`` renders them (a chapter not executed yet is left out of its table of contents)."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    site = tmp_path_factory.mktemp("committed-book") / "book"
    generated = ("chapters/results", "chapters/course")  # pages a build writes
    shutil.copytree(
        root / "book", site, ignore=shutil.ignore_patterns("_build", ".*", "results.md", "course.md")
    )
    (site / "chapters").mkdir(exist_ok=True)
    toc = yaml.safe_load((site / "_toc.yml").read_text())
    for part in toc["parts"]:
        part["chapters"] = [c for c in part["chapters"] if c["file"] in generated
                            or not c["file"].startswith("chapters/")
                            or (site / f"{c['file']}.ipynb").exists()]  # fmt: skip
    toc["parts"] = [part for part in toc["parts"] if part["chapters"]]
    (site / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    # the Pages workflow names the repository it publishes from, which gives the launch buttons
    config = yaml.safe_load((site / "_config.yml").read_text())
    config["repository"]["url"] = PUBLISHED_FROM
    (site / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    render(site)
    return site
