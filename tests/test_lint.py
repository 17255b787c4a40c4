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
