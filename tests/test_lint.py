import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.fail("ruff is not installed in this environment; run `make setup`")
    result = subprocess.run(
        [ruff, "check", "src", "tests", "bench", "notebooks"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def test_chapter_sources_keep_the_line_length_but_for_cell_headers():
    """Ruff's E501 is off for notebooks/ because a cell header (``# %% tags=[...] alt="..."``)
    holds a figure's whole alt text; every other line keeps ruff's limit."""
    import tomllib

    limit = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]
    long = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "notebooks").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if len(line) > limit and not line.startswith("# %%")
    ]
    assert not long, f"lines over {limit} characters: {long}"
