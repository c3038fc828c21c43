"""A JSON text read one value at a time, for documents too large to hold whole (an OTLP export of
a day of spans): :class:`JsonStream` steps through an object's members and an array's elements and
decodes only the values the caller asks for, over a rolling buffer of one read."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import IO, Any

from rlops.data_contracts.records import MAX_DEPTH

#: The most text one value of a document (one span, one resource block) may take.
MAX_VALUE_CHARS = 16 << 20
_READ_CHARS = 1 << 20
#: What a scan past an undecodable value stops at: a bracket or a quote; inside a string, the
#: closing quote or an escape.
_STRUCTURE = re.compile(r'[\[\]{}"]')
_IN_STRING = re.compile(r'["\\]')
TOO_DEEP = f"depth: JSON nested too deep to parse (more than {MAX_DEPTH} levels allowed)"


class TooDeep(ValueError):
    """A value nested past what the JSON decoder can recurse into; the reader is already past it."""


class JsonStream:
    """A rolling buffer over a text stream that decodes one JSON value at a time
    (``json.JSONDecoder.raw_decode``), so a document is never held whole."""

    def __init__(self, stream: IO[str], uri: str) -> None:
        self.stream, self.uri = stream, uri
        self.buf, self.pos, self.offset, self.eof = "", 0, 0, False
        self.decoder = json.JSONDecoder()

    def _more(self) -> bool:
        if self.eof:
            return False
        data = self.stream.read(_READ_CHARS)
        if not data:
            self.eof = True
            return False
        self.offset += self.pos
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-blank character ("" at the end)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def take(self, expected: str) -> None:
        got = self.peek()
        if got != expected:
            raise ValueError(f"expected {expected!r} at character {self.offset + self.pos}, got {got or 'the end'!r}")
        self.pos += 1

    def value(self) -> Any:
        """Decode the next JSON value whole (reading on while it is incomplete). A value nested too
        deeply to decode is stepped over and raises :class:`TooDeep`, the reader after it."""
        self.peek()
        while True:
            try:
                obj, stop = self.decoder.raw_decode(self.buf, self.pos)
            except RecursionError:
                at = self.offset + self.pos
                self.skip()
                raise TooDeep(f"the value at character {at}: {TOO_DEEP}") from None
            except ValueError:
                if len(self.buf) - self.pos > MAX_VALUE_CHARS:
                    raise ValueError(
                        f"a value at character {self.offset + self.pos} is over "
                        f"{MAX_VALUE_CHARS} characters or not JSON"
                    ) from None
                if not self._more():
                    raise ValueError(
                        f"the document ends inside a value at character {self.offset + self.pos}"
                    ) from None
                continue
            # a number cut by the read boundary: decode again with the rest
            if stop == len(self.buf) and not self.eof and isinstance(obj, (int, float)) and self._more():
                continue
            self.pos = stop
            return obj

    def skip(self) -> None:
        """Step over the array or object that starts here without decoding it: brackets counted
        outside strings, the buffer rolled on as it goes (memory stays one read)."""
        start, depth, i, in_string = self.offset + self.pos, 0, self.pos, False
        while True:
            found = (_IN_STRING if in_string else _STRUCTURE).search(self.buf, i)
            if found is None or found.end() >= len(self.buf) and found.group() == "\\":
                # the rest of the buffer holds nothing that counts (or an escape cut by the read)
                self.pos = found.start() if found is not None else len(self.buf)
                if self.offset + self.pos - start > MAX_VALUE_CHARS:
                    raise ValueError(f"a value at character {start} is over {MAX_VALUE_CHARS} characters")
                if not self._more():
                    raise ValueError(f"the document ends inside a value at character {start}")
                i = 0
                continue
            c, i = found.group(), found.end()
            if in_string:
                if c == "\\":
                    i += 1  # the escaped character, whatever it is
                else:
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "[{":
                depth += 1
            else:
                depth -= 1
                if depth <= 0:
                    self.pos = i
                    return

    def next_document(self) -> bool:
        """Skip to the next line that starts a document (``{`` in its first column), as in the
        collector's one-document-per-line files; False when there is none."""
        while True:
            at = self.buf.find("\n{", self.pos)
            if at >= 0:
                self.pos = at + 1
                return True
            self.pos = max(self.pos, len(self.buf) - 1)
            if not self._more():
                self.pos = len(self.buf)
                return False

    def members(self) -> Iterator[str]:
        """The keys of the object that starts here, one by one; the caller consumes each value."""
        self.take("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            self.take(":")
            yield str(key)
            nxt = self.peek()
            self.pos += 1
            if nxt == "}":
                return
            if nxt != ",":
                raise ValueError(f"expected ',' or '}}' at character {self.offset + self.pos - 1}")

    def elements(self) -> Iterator[None]:
        """Steps through the array that starts here; the caller consumes each element."""
        self.take("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield None
            nxt = self.peek()
            self.pos += 1
            if nxt == "]":
                return
            if nxt != ",":
                raise ValueError(f"expected ',' or ']' at character {self.offset + self.pos - 1}")
