"""Where the tests find the repository, the golden files and the benchmark data (``SELFEVO_DATA``, else the
``shared/data`` folder beside the repository), and the mark that skips a test when the data is not there."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
HELPERS = TESTS / "helpers"
GOLDEN = TESTS / "golden"
DATA = os.environ.get("SELFEVO_DATA", os.path.join(ROOT, "..", "shared", "data"))

needs_data = pytest.mark.skipif(not os.path.isdir(DATA), reason="benchmark data not found (set SELFEVO_DATA)")
