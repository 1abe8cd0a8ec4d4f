"""Running vtriage as root in a shared folder: no code from the working folder runs, -o writes only the
named regular file, an input is never the output, and FIFOs say what they wait for (docs/safety.md)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from triage.sources.files import PARALLEL_MIN_BYTES

VTRIAGE = shutil.which("vtriage", path=str(Path(sys.executable).parent)) or "vtriage"

REQUEST = ("(APIServer pid=1) INFO 09-30 10:00:00 [logger.py:43] Received request chatcmpl-{i:08x}: "
           "prompt: 'hello there', params: SamplingParams(n=1, temperature=0.7), prompt_token_ids: None.\n")


def _large_log(path: Path) -> None:
    """A log just over the size that starts worker processes, of request lines the workers set aside."""
    chunk = "".join(REQUEST.format(i=i) for i in range(4096)).encode()
    with open(path, "wb") as out:
        for _ in range(PARALLEL_MIN_BYTES // len(chunk) + 1):
            out.write(chunk)


def test_no_code_from_the_working_folder_runs_while_reading_a_large_log(tmp_path):
    """A `triage/` package planted in the folder vtriage runs in (a shared /tmp) is never imported, neither by
    vtriage nor by the worker processes a large log starts."""
    marker = tmp_path / "ran"
    planted = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    package = tmp_path / "triage"
    (package / "sources").mkdir(parents=True)
    for module in ("__init__.py", "sources/__init__.py", "sources/workers.py"):
        (package / module).write_text(planted + "def serve():\n    pass\n")
    log = tmp_path / "big.log"
    _large_log(log)
    result = subprocess.run([VTRIAGE, "--format", "json", log.name], capture_output=True, cwd=tmp_path,
                            stdin=subprocess.DEVNULL, timeout=300, check=False)
    assert result.returncode in (0, 1, 3), result.stderr.decode()
    assert b'"lines_read": ' in result.stdout
    assert not marker.exists(), marker.read_text()
