"""Reading the files of a scenario pack: every file must be a regular file that resolves inside
the pack, is not larger than :data:`MAX_FILE_BYTES` and is UTF-8 text.

A pack comes from a business author or a pull request, so its files are untrusted input: a
``scenario.yaml`` that is a link to a credentials file must be refused *before* it is read (a
parse error would otherwise quote its content), a named pipe would block a reader forever, and a
huge file would stall validation. Errors name the file as the pack spells it and never quote
anything read from outside the pack.
"""

from __future__ import annotations

import stat
from pathlib import Path

from rlops.sandbox.errors import PackError

#: The largest pack file read (YAML or Python): packs are hand-written text.
MAX_FILE_BYTES = 1 << 20


def check_pack_file(path: Path, root: Path | None) -> Path:
    """The resolved location of ``path``, after checking that it lies inside ``root`` (when
    given) and is a regular file of at most :data:`MAX_FILE_BYTES`."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop on older Pythons
        raise PackError(str(path), None, "", f"cannot read file: {getattr(exc, 'strerror', None) or exc}") from None
    if root is not None:
        real_root = root.resolve()
        if real != real_root and real_root not in real.parents:
            raise PackError(
                str(path),
                None,
                "",
                "the file resolves to a location outside the pack (a link out "
                "of the pack is refused; copy the file into the pack)",
            )
    try:
        st = real.stat()
    except OSError as exc:
        raise PackError(str(path), None, "", f"cannot read file: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise PackError(str(path), None, "", "expected a regular file (not a folder, pipe or device)")
    if st.st_size > MAX_FILE_BYTES:
        raise PackError(
            str(path),
            None,
            "",
            f"the file has {st.st_size} bytes, over the limit of {MAX_FILE_BYTES} bytes for a pack file",
        )
    return real


def read_pack_text(path: Path, root: Path | None = None) -> str:
    """The UTF-8 text of a pack file (see :func:`check_pack_file`); a :class:`PackError` otherwise."""
    real = check_pack_file(path, root)
    try:
        with open(real, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise PackError(str(path), None, "", f"cannot read file: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:  # grew since the check
        raise PackError(str(path), None, "", f"the file is over the limit of {MAX_FILE_BYTES} bytes for a pack file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PackError(
            str(path),
            line,
            "",
            f"the file is not UTF-8 text (byte 0x{data[exc.start]:02x} cannot be decoded); save it as UTF-8",
        ) from None
