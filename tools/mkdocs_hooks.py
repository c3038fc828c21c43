"""MkDocs hook: pages of the site that live outside ``docs/`` in the repository.

``docker/README.md`` stays next to the compose file it explains (it is read there, on the machine
that runs the containers) and is also the site's page ``docker.md``; nothing is copied into
``docs/``, so there is one text to keep true.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTSIDE_PAGES = {"docker.md": REPO_ROOT / "docker" / "README.md"}


def on_files(files: Files, config: Any) -> Files:
    for name, source in OUTSIDE_PAGES.items():
        files.append(File.generated(config, name, abs_src_path=str(source)))
    return files
