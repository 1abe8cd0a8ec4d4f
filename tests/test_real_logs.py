"""The labelled real-log excerpts in ../shared (when this checkout has them) are all diagnosed right."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, SHARED

SCORE = SHARED / "eval" / "score_corpus.py"
LABEL_FILES = ("labels.json", "labels-2.json")


@pytest.mark.skipif(not SCORE.exists(), reason="../shared/eval is not next to this checkout")
@pytest.mark.parametrize("labels", LABEL_FILES)
def test_real_log_excerpts_score_perfectly(labels):
    vtriage = shutil.which("vtriage") or str(ROOT / ".venv" / "bin" / "vtriage")
    result = subprocess.run([sys.executable, str(SCORE), vtriage, str(SHARED / "real-logs" / labels),
                             "--min-accuracy", "1.0", "--min-figures", "0.9", "-v"],
                            check=False, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
