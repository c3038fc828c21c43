"""What the libraries under rlops log while a command of the ``rlops`` command line runs.

MLflow reports a database error it then raises (a read-only tracking database, a locked one) on its
own logger, with the SQLAlchemy traceback — a hundred lines and more on stderr — before rlops
catches the error and says in one paragraph what failed and what to check. For the command's
duration such a record (a library's record that carries a traceback) is a debug record: a person
reads rlops' message only, and ``rlops --debug`` or a logger set to DEBUG still shows it all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The top-level loggers whose tracebacks are debug output on the command line.
LIBRARIES = ("mlflow", "sqlalchemy", "alembic")
_DEMOTED = "_rlops_demoted"


def _is_library(name: str) -> bool:
    return name.split(".", 1)[0] in LIBRARIES


def _keep(record: logging.LogRecord) -> bool:
    """A demoted record goes on only where its logger is enabled for debug records."""
    return not getattr(record, _DEMOTED, False) or logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


@contextmanager
def library_tracebacks_to_debug() -> Iterator[None]:
    """While the block runs, a record of MLflow's, SQLAlchemy's or Alembic's loggers that carries a
    traceback is a DEBUG record, dropped unless its logger is enabled for DEBUG. The libraries'
    loggers may not exist yet (MLflow is imported by the command itself), so records are caught as
    they are made, and the logger a record comes from gets the filter that drops it before any
    handler sees it."""
    previous = logging.getLogRecordFactory()
    filtered: list[logging.Logger] = []

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if record.exc_info and record.levelno > logging.DEBUG and _is_library(record.name):
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
            setattr(record, _DEMOTED, True)
            logger = logging.getLogger(record.name)
            # the originating logger's filters are consulted after the record is made
            if _keep not in logger.filters:
                logger.addFilter(_keep)
                filtered.append(logger)
        return record

    logging.setLogRecordFactory(factory)
    try:
        yield
    finally:
        logging.setLogRecordFactory(previous)
        for logger in filtered:
            logger.removeFilter(_keep)
