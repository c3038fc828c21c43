"""Logged live traffic with known propensities for the ``--target`` tests (library and command):
credit-pack episodes served by an exploring logger around an untrained network, the logger's own
probabilities of every action on each row, and the window the traffic lies in."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SCENARIO = "credit_approval"
RUN_KEY = "20260105T1000"
EPISODES = 400
EXPLORE = 0.3
#: The ``ope:`` settings the tests judge with: the window holds 400 episodes, not the 200+ at the
#: effective sample size the gate asks of a candidate in production.
OPE = {"min_episodes": 100, "min_ess": 10, "direct_method": "none", "dm_episodes": 200, "bootstrap_samples": 200}


@functools.lru_cache(maxsize=1)
def _logged() -> tuple[Any, Any, pd.DataFrame]:
    import torch

    from rlops.model.policy import PolicyConfig, PolicyNetwork
    from rlops.pipeline_steps.promotion.ope_direct import exploring_policy
    from rlops.pipeline_steps.promotion.ope_value import network_target
    from rlops.sandbox.traces import rollout_traces
    from tests.policy_kit import credit_pack

    pack = credit_pack()
    torch.manual_seed(5)
    behaviour = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout)).eval()
    logger = exploring_policy(network_target(behaviour, greedy=False), EXPLORE, seed=1)
    rows = rollout_traces(
        pack,
        logger,
        EPISODES,
        seed=11,
        profile="live",
        reward_fn="v1",
        source="live",
        episode_prefix="live",
        start_ts=datetime(2026, 1, 5, 9, 10, tzinfo=UTC),
    )
    return pack, behaviour, rows


def logged_rows() -> pd.DataFrame:
    """The logged rows (a copy: a test may spoil it)."""
    return _logged()[2].copy()


def logging_probabilities(rows: pd.DataFrame) -> pd.DataFrame:
    """The logger's probability of every action on each of ``rows``: ``trace_id`` and one column
    per action, as a file target gives them."""
    from rlops.pipeline_steps.promotion.ope_value import network_target
    from rlops.trace_store.states import observations_from_traces

    pack, behaviour, _ = _logged()
    obs, mask = observations_from_traces(pack, rows)
    pi = network_target(behaviour, greedy=False)(obs, mask)
    legal = mask.numpy().astype(np.float64)
    p = (1 - EXPLORE) * pi + EXPLORE * legal / legal.sum(axis=1, keepdims=True)
    p = p / p.sum(axis=1, keepdims=True)  # float32 softmax: exactly 1 for the file's check
    out = pd.DataFrame(p, columns=list(pack.scenario.action_names))
    out.insert(0, "trace_id", rows["trace_id"].to_numpy())
    return out


def write_window(storage: Any, uri: Any, rows: pd.DataFrame) -> None:
    """``rows`` as the trace store's hour 09 of 2026-01-05 (inside the run key's window)."""
    from rlops.trace_store.store import partition_path

    storage.write_parquet(
        uri("traces", partition_path(scenario=SCENARIO, date="2026-01-05", hour=9), "part-logged.parquet"), rows
    )


def write_table(table: pd.DataFrame, path: Path) -> Path:
    """``table`` as parquet, CSV or JSON lines, by ``path``'s suffix."""
    if path.suffix == ".parquet":
        table.to_parquet(path)
    elif path.suffix == ".csv":
        table.to_csv(path, index=False)
    else:
        table.to_json(path, orient="records", lines=True)
    return path
