"""MkDocs hooks: pages of the site that live outside ``docs/``, and table cells written for both
renderers.

``docker/README.md`` stays next to the compose file it explains (it is read there, on the machine
that runs the containers) and is also the site's page ``docker.md``; nothing is copied into
``docs/``, so there is one text to keep true.

A ``|`` inside a code span of a table row must be written ``\\|`` for GitHub's renderer, which
shows it as ``|``; Python-Markdown already keeps code spans whole when it splits a row and would
show the backslash, so the site's copy of such a span drops it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTSIDE_PAGES = {"docker.md": REPO_ROOT / "docker" / "README.md"}
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def on_files(files: Files, config: Any) -> Files:
    for name, source in OUTSIDE_PAGES.items():
        files.append(File.generated(config, name, abs_src_path=str(source)))
    return files


def unescape_table_code(markdown: str) -> str:
    """``\\|`` → ``|`` inside the code spans of table rows (lines starting with ``|``), outside fences."""
    out = []
    fenced = False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.lstrip().startswith("|"):
            line = _CODE_SPAN.sub(lambda m: m.group(0).replace("\\|", "|"), line)
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return unescape_table_code(markdown)
