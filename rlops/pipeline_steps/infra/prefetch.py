"""Reading ahead: the next item of a slow iterator produced on a thread of its own."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def prefetched(frames: Iterable[T]) -> Iterator[T]:
    """``frames``, the next one produced (a DuckDB scan and its conversion, say) on a thread of its
    own while the caller works on this one: the two overlap on a second core. At most two frames
    are held; an error of the producer is raised in the caller, and a caller that stops early lets
    the producer go."""
    import queue
    import threading

    box: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def pull() -> None:
        try:
            for frame in frames:
                while not stop.is_set():
                    try:
                        box.put(("frame", frame), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            box.put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            box.put(("error", exc))

    worker = threading.Thread(target=pull, name="drift-window-read", daemon=True)
    worker.start()
    try:
        while True:
            kind, item = box.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)
