"""Trace and label data contracts: schemas, Great Expectations suites, row validation.

>>> from rlops.data_contracts import trace_contract, validate_frame
>>> contract = trace_contract("credit_approval", ["approve", "reject"],
...                           [("user_profile.credit_score", "int", 300, 850, None)])
>>> result = validate_frame(rows_df, contract)          # doctest: +SKIP
>>> result.accepted, result.quarantined                  # doctest: +SKIP
"""

from rlops.data_contracts.contracts import StateField, label_contract, trace_contract
from rlops.data_contracts.conversion import normalize
from rlops.data_contracts.records import parse_json_lines, quarantine_frame
from rlops.data_contracts.schema import (
    EXTRA_COLUMN,
    META_PREFIX,
    STATE_PREFIX,
    ColumnSpec,
    Contract,
    build_suites,
)
from rlops.data_contracts.validation import REASON_COLUMN, ValidationResult, validate_frame

__all__ = [
    "EXTRA_COLUMN",
    "META_PREFIX",
    "REASON_COLUMN",
    "STATE_PREFIX",
    "ColumnSpec",
    "Contract",
    "StateField",
    "ValidationResult",
    "build_suites",
    "label_contract",
    "normalize",
    "parse_json_lines",
    "quarantine_frame",
    "trace_contract",
    "validate_frame",
]
