import os
import tempfile

import pytest
import torch

# Tests never use what an earlier run or session cached, and never wait on the network.
os.environ["RESID_CACHE"] = tempfile.mkdtemp(prefix="resid-test-cache-")
os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def smollm2():
    import resid

    return resid.load("smollm2-135m")


@pytest.fixture(scope="session")
def quick_book(tmp_path_factory):
    """The book with every chapter executed in quick mode, its results page, and its HTML:
    the site a reader's browser gets (``<site>/_build/html``)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from resid import book

    root = Path(__file__).resolve().parents[1]
    site = tmp_path_factory.mktemp("quick-book") / "book"
    shutil.copytree(root / "book", site, ignore=shutil.ignore_patterns("_build", "chapters"))
    for name in book.chapters():
        book.run_chapter(name, {"quick": True}, out_dir=site / "chapters", progress=False)
    book.results_page(site / "chapters", toc=site / "_toc.yml")
    result = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", str(site), "--warningiserror"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return site


@pytest.fixture(scope="session")
def committed_book(tmp_path_factory, quick_book):
    """The published book: the executed chapters committed in book/chapters, rendered as
    ``make book`` renders them. A chapter not executed yet is taken from the quick build, so
    that the site is whole."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from resid import book

    root = Path(__file__).resolve().parents[1]
    site = tmp_path_factory.mktemp("committed-book") / "book"
    shutil.copytree(root / "book", site, ignore=shutil.ignore_patterns("_build", ".*", "results.md"))
    (site / "chapters").mkdir(exist_ok=True)
    for name in book.chapters():
        for suffix in (".ipynb", ".json"):
            if not (site / "chapters" / f"{name}{suffix}").exists():
                shutil.copy(quick_book / "chapters" / f"{name}{suffix}", site / "chapters")
    book.results_page(site / "chapters", toc=site / "_toc.yml")
    result = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", str(site), "--warningiserror"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return site
