"""``python -m resid.train``: see ``resid.train.training``."""

from .training import main

main()
