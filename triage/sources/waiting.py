"""Opening a FIFO: open() waits, without a word, until the other end is opened too. A FIFO given by
mistake (no writer behind an input, no reader behind -o) would look like a hang, so after NOTICE_SECONDS
vtriage says on stderr what it waits for, and goes on waiting (Ctrl-C stops it)."""
from __future__ import annotations

import os
import sys
import threading

NOTICE_SECONDS = 3.0


def open_fifo(path: str, flags: int) -> int:
    """os.open(path, flags) on a FIFO, saying on stderr what it waits for should the other end be slow to come."""
    other_end = "a writer" if flags & os.O_ACCMODE == os.O_RDONLY else "a reader"
    notice = threading.Timer(NOTICE_SECONDS, _say, (f"vtriage: waiting for {other_end} on FIFO {path}\n",))
    notice.daemon = True
    notice.start()
    try:
        return os.open(path, flags)
    finally:
        notice.cancel()


def _say(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):      # stderr closed: the wait goes on unannounced
        pass
