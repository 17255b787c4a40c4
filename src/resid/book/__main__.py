"""``python -m resid.book``: see ``resid.book.runner``."""

from .runner import main

main()
