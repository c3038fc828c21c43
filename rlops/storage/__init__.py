"""Object storage: one :class:`~rlops.storage.backend.Storage` for ``file://`` and ``s3://`` URIs
(atomic, verified writes; :mod:`rlops.storage.s3` holds the boto3 client and its retries;
:mod:`rlops.storage.errors` the errors a step reports). Every read and write of traces, reports and
checkpoints goes through it; where data lives is declared once in the params' ``storage:`` block."""
