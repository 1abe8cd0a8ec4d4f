"""Opening a FIFO: open() waits, without a word, until the other end is opened too. A FIFO given by
mistake (no writer behind an input, no reader behind -o) would look like a hang, so after NOTICE_SECONDS
vtriage says what it waits for, and goes on waiting (Ctrl-C stops it). The notice goes through the caller's
`say` (the CLI's one stderr writer), because the path it names came from the user and may hold anything."""
from __future__ import annotations

import os
import threading
from typing import Callable

NOTICE_SECONDS = 3.0


def open_fifo(path: str, flags: int, say: Callable[[str], None] | None) -> int:
    """os.open(path, flags) on a FIFO; should the other end be slow to come, `say` is told what it waits for."""
    if say is None:
        return os.open(path, flags)
    other_end = "a writer" if flags & os.O_ACCMODE == os.O_RDONLY else "a reader"
    notice = threading.Timer(NOTICE_SECONDS, say, (f"vtriage: waiting for {other_end} on FIFO {path}",))
    notice.daemon = True
    notice.start()
    try:
        return os.open(path, flags)
    finally:
        notice.cancel()
