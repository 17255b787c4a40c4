"""Where the book's data files are: in a clone, the repository's folders; in an installed wheel
(``make wheel``), the copies bundled inside the package, so that a handout runs anywhere."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository, in a clone
CHAPTERS_OUT = ROOT / "book" / "chapters"  # the executed chapters and their results, committed
# Committed, so that a launch button (Binder, Colab) can open them: the theme opens
# <path_to_book>/<page>.ipynb, and the book's _config.yml names book/handouts as that path.
HANDOUTS_OUT = ROOT / "book" / "handouts"
BUNDLED = Path(__file__).resolve().parents[1] / "_data"  # written into the wheel by `make wheel`


def book_folder(relative: str) -> Path:
    """``ROOT / relative`` in a clone; else its copy in the installed package (same last name)."""
    in_clone = ROOT / relative
    return in_clone if in_clone.is_dir() else BUNDLED / Path(relative).name


def cache_dir() -> Path:
    """Where converted models and training runs live: ``$RESID_CACHE``, else the user cache."""
    if "RESID_CACHE" in os.environ:
        return Path(os.environ["RESID_CACHE"])
    import platformdirs

    return Path(platformdirs.user_cache_dir("resid"))
