"""Keeps the stack's process logs bounded: each ``<part>.log`` over ``stack.log_max_mb`` is copied
to ``<part>.log.1`` (older copies shifted up to ``stack.log_keep``, the oldest dropped) and
truncated in place. The parts write their logs with ``O_APPEND``, so after the truncation their
next line lands at the start of the emptied file, and no process needs to reopen anything.

Runs as the stack's ``log-rotation`` part: ``python -m rlops.stack.log_rotation FOLDER MAX_MB KEEP``
(no rlops imports beyond this module: it stays a few MB of memory)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

#: How often the folder is looked at: a part writes ~11 MB an hour, so a minute overshoots little.
PERIOD_S = 60.0


def rotate(folder: Path, max_bytes: int, keep: int) -> list[Path]:
    """Rotate every ``*.log`` of ``folder`` larger than ``max_bytes``; the logs rotated."""
    rotated = []
    for log in sorted(folder.glob("*.log")):
        try:
            if log.stat().st_size <= max_bytes:
                continue
            for n in range(keep - 1, 0, -1):
                older = log.with_name(f"{log.name}.{n}")
                if older.exists():
                    os.replace(older, log.with_name(f"{log.name}.{n + 1}"))
            shutil.copyfile(log, log.with_name(f"{log.name}.1"))
            with open(log, "r+b") as f:
                f.truncate(0)
            log.with_name(f"{log.name}.{keep + 1}").unlink(missing_ok=True)
            rotated.append(log)
        except OSError as exc:  # a log removed by hand meanwhile, a full disk: try again next time
            print(f"log rotation of {log} failed: {exc}", file=sys.stderr, flush=True)
    return rotated


def main(argv: list[str]) -> int:
    folder, max_mb, keep = Path(argv[0]), float(argv[1]), int(argv[2])
    while True:
        rotate(folder, int(max_mb * 1024 * 1024), keep)
        time.sleep(PERIOD_S)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
