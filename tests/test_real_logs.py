"""The team's labelled real-log excerpts, when they sit next to this checkout (../shared, never copied into
the repository), are all diagnosed right; a clone without them skips this."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, SHARED

SCORE = SHARED / "eval" / "score_corpus.py"
LABEL_FILES = ("labels.json", "labels-2.json")


@pytest.mark.parametrize("labels", LABEL_FILES)
def test_real_log_excerpts_score_perfectly(labels):
    if not SCORE.exists() or not (SHARED / "real-logs" / labels).exists():
        pytest.skip(f"../shared/eval or ../shared/real-logs/{labels} is not next to this checkout")
    vtriage = shutil.which("vtriage") or str(ROOT / ".venv" / "bin" / "vtriage")
    result = subprocess.run([sys.executable, str(SCORE), vtriage, str(SHARED / "real-logs" / labels),
                             "--min-accuracy", "1.0", "--min-figures", "0.9", "-v"],
                            check=False, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
