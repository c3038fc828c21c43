"""The streaming JSON reader of OTLP exports: a value nested past the decoder's recursion limit is
stepped over — brackets inside strings and escaped quotes not counted, across read boundaries —
and the values after it decode as before."""

from __future__ import annotations

import io

import pytest

from rlops.pipeline_steps.capture import json_stream
from rlops.pipeline_steps.capture.json_stream import JsonStream, TooDeep


@pytest.mark.parametrize("read_chars", [1, 3, 7, 1 << 20])
def test_a_value_too_deep_is_stepped_over(monkeypatch: pytest.MonkeyPatch, read_chars: int) -> None:
    monkeypatch.setattr(json_stream, "_READ_CHARS", read_chars)
    tricky = '"a ] } [ \\" \\\\", '  # brackets in a string, an escaped quote, an escaped backslash
    deep = "[" * 5_000 + tricky + "{}" + "]" * 5_000
    r = JsonStream(io.StringIO(f'[{deep}, {{"after": "[x]"}}, 3]'), "mem")
    got: list[object] = []
    for _ in r.elements():
        try:
            got.append(r.value())
        except TooDeep as exc:
            assert "depth" in str(exc)
            got.append("too deep")
    assert got == ["too deep", {"after": "[x]"}, 3]


def test_a_deep_value_cut_off_is_a_broken_document(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_stream, "_READ_CHARS", 64)
    r = JsonStream(io.StringIO("[" * 5_000), "mem")
    with pytest.raises(ValueError, match="ends inside a value"):
        r.value()
