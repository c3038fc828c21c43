"""What a storage root, an MLflow tracking URI and a label-queue database URL may be, checked where
params are read: a value no command can use is refused by ``rlops config validate`` and by every
command's params, naming the key (and the environment variable that set it), instead of failing
later inside the first command that connects — or meaning a local folder named ``nonsense:``.

Each check returns what is wrong (None: usable); no heavy library is imported (a scheme that is not
built in is looked up among the installed plugins' entry points only when it is met).
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points

from rlops.common.redact import redact

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: A URI with its ``//`` or ``:`` lost: otherwise a relative folder named ``http:`` or ``http``.
_HALF_URI = re.compile(r"^(https?|file|sqlite|postgresql|mysql|mssql)(\+\w+)?(:/?(?!/)|//)", re.IGNORECASE)

#: MLflow's own tracking stores (``mlflow.tracking._tracking_service.utils``); a plugin adds its
#: scheme under the ``mlflow.tracking_store`` entry point.
TRACKING_SCHEMES = frozenset({"file", "http", "https", "databricks", "databricks-uc", "uc"})
DATABASE_DIALECTS = frozenset({"sqlite", "postgresql", "mysql", "mariadb", "mssql", "oracle"})
_TRACKING_EXPECTED = (
    "expected http(s)://host:port, sqlite:///file.db, a database URL (postgresql://, mysql://, mssql://), "
    "file:///folder, a local folder or databricks"
)
_QUEUE_EXPECTED = "expected dialect[+driver]://…, e.g. sqlite:///queue.db or postgresql+psycopg2://host/db"


def _plugin_names(group: str) -> set[str]:
    return {ep.name.split(".")[0].lower() for ep in entry_points(group=group)}


def storage_root_problem(value: str) -> str | None:
    """``file://<path>``, a local path or ``s3://bucket[/prefix]`` (what ``rlops.storage`` serves)."""
    scheme = _SCHEME.match(value)
    if scheme is None or scheme[1].lower() == "file":
        return None
    if scheme[1].lower() != "s3":
        return f"unsupported storage URI {redact(value)!r}; expected file://<path>, a local path or s3://bucket/prefix"
    if not value[len("s3://") :].partition("/")[0]:
        return f"S3 URI {value!r} has no bucket; expected s3://bucket/prefix"
    return None


def tracking_uri_problem(value: str) -> str | None:
    """A URI MLflow has a tracking store for, or a local folder."""
    shown = redact(value)
    if _HALF_URI.match(value):
        mangled = f"MLflow tracking URI {shown!r} is a URI with its '://' mangled (it would be a local folder)"
        return f"{mangled}; {_TRACKING_EXPECTED}"
    scheme = _SCHEME.match(value)
    if scheme is None:
        return None  # a local folder (or "databricks")
    name = scheme[1].lower()
    if name in TRACKING_SCHEMES or name.split("+")[0] in DATABASE_DIALECTS - {"oracle", "mariadb"}:
        return None
    if name in _plugin_names("mlflow.tracking_store"):
        return None
    return f"MLflow has no tracking store for {shown!r} (scheme {name!r}); {_TRACKING_EXPECTED}"


def queue_url_problem(value: str) -> str | None:
    """A SQLAlchemy URL whose dialect is built in or installed."""
    shown = redact(value)
    scheme = re.match(r"^([\w+]+)://", value)
    if scheme is None:
        return f"label queue database URL {shown!r} is not a SQLAlchemy URL; {_QUEUE_EXPECTED}"
    dialect = scheme[1].split("+")[0].lower()
    if dialect in DATABASE_DIALECTS or dialect in _plugin_names("sqlalchemy.dialects"):
        return None
    return (
        f"label queue database URL {shown!r} names the database {dialect!r}, which SQLAlchemy has no dialect "
        f"for (built in: {', '.join(sorted(DATABASE_DIALECTS))}); {_QUEUE_EXPECTED}"
    )


__all__ = ["queue_url_problem", "storage_root_problem", "tracking_uri_problem"]
