"""``rlops train relabel``: the reward model labels captured traces offline.

Reads the run key's trace window (``relabel.window_hours``) from the trace store, scores every
step with a registered ``<scenario>-reward-model`` version (the newest unless one is named) and
writes one label row per trace row next to the traces:
``reward_labels/scenario=<s>/run_key=<key>/labels.parquet`` with ``episode_id, step, trace_id,
reward_model_version, rm_score`` (rows out = rows in, always). Policy training reads these labels
for its behaviour-cloning warm start (:mod:`rlops.model.behaviour_cloning`). Re-running a run key
overwrites its file.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlops.common.step_result import StepResult
from rlops.model.reward_model import CONFIG_FILE, load_reward_model, score
from rlops.model.reward_pairs import outcome_features
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.services import StepServices
from rlops.registry.client import reward_model_name
from rlops.registry.versions import latest_model_version
from rlops.trace_store.states import action_codes, error_flags, observations_from_traces

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from rlops.model.reward_model import RewardModel
    from rlops.sandbox.pack import Pack

LABELS_DIR = "reward_labels"
KEYS = ("episode_id", "step")


# --------------------------------------------------------------------------- pure core
def step_inputs(pack: Pack, df: pd.DataFrame) -> tuple[torch.Tensor, ...]:
    """``(obs, masks, actions, outcomes)`` of trace rows, as the policy and reward model see them."""
    import numpy as np
    import pandas as pd
    import torch

    obs, masks = observations_from_traces(pack, df)
    actions = torch.from_numpy(action_codes(pack, df["action"]))
    latency = torch.from_numpy(
        pd.to_numeric(df["latency_ms"], errors="coerce").fillna(0.0).to_numpy(np.float32)
        if "latency_ms" in df.columns
        else np.zeros(len(df), np.float32)
    )
    err = torch.from_numpy(
        np.array(error_flags(df["error"]), dtype=bool) if "error" in df.columns else np.zeros(len(df), bool)
    )
    done = torch.from_numpy(
        np.array(df["done"].fillna(False).astype(bool).to_numpy(), dtype=bool)
        if "done" in df.columns
        else np.zeros(len(df), bool)
    )
    return obs, masks, actions, outcome_features(latency, err, done)


def relabel_frame(pack: Pack, model: RewardModel, df: pd.DataFrame, version: str) -> pd.DataFrame:
    """One label row per trace row: the reward model's score of the step."""
    import pandas as pd

    obs, _, actions, outcomes = step_inputs(pack, df)
    s = score(model, obs[:, : pack.scenario.layout.n_features], actions, outcomes)
    out = pd.DataFrame(
        {
            "episode_id": df["episode_id"].astype(str).to_numpy(),
            "step": pd.to_numeric(df["step"]).astype("int64").to_numpy(),
        }
    )
    if "trace_id" in df.columns:
        out["trace_id"] = df["trace_id"].astype(str).to_numpy()
    out["reward_model_version"] = str(version)
    out["rm_score"] = s.numpy().astype("float64")
    return out


# --------------------------------------------------------------------------- registry
def latest_reward_model_version(ctx: StepServices) -> str | None:
    """The newest version of ``<scenario>-reward-model`` (None when none is registered)."""
    return latest_model_version(ctx.tracker, reward_model_name(ctx.scenario))


def load_reward_model_version(ctx: StepServices, version: str | None = None) -> tuple[str, RewardModel]:
    """``(version, model)`` of a registered reward model (the newest when ``version`` is None)."""
    name = reward_model_name(ctx.scenario)
    version = version or latest_reward_model_version(ctx)
    if version is None:
        raise ValueError(f"no {name} is registered yet; train one first (rlops train-reward-model)")
    source = ctx.tracker.model_version_source(name, str(version))
    run_id, _, path = source[len("runs:/") :].partition("/")
    with tempfile.TemporaryDirectory(prefix="rlops-rm-") as tmp:
        folder = ctx.tracker.download_artifacts(run_id, path, Path(tmp))
        found = sorted(Path(folder).rglob(CONFIG_FILE)) if Path(folder).is_dir() else []
        if not found:
            raise FileNotFoundError(f"{name} v{version} (source {source}) holds no {CONFIG_FILE}")
        return str(version), load_reward_model(found[0].parent)


# --------------------------------------------------------------------------- the step
def labels_uri(ctx: StepServices, run_key: str | None = None) -> str:
    return ctx.uri(LABELS_DIR, f"scenario={ctx.scenario}", f"run_key={run_key or ctx.run_key}", "labels.parquet")


def window_traces(services: StepServices, hours: float, traces_uri: str | None = None) -> pd.DataFrame:
    """The ``hours`` before the run key's end of this scenario's traces (empty when there are none)."""
    window = services.key.lookback(float(hours))
    df = services.traces.reader.read(traces_uri or services.traces.scenario_uri(services.scenario), window)
    if not df.empty and "scenario" in df.columns:
        df = df[df["scenario"] == services.scenario].reset_index(drop=True)
    return df


@dataclass(frozen=True)
class RelabelSummary(StepResult):
    """The window's trace rows scored by the reward model, and where the labels went."""

    scenario: str
    run_key: str
    rows_in: int
    labels_uri: str
    dry_run: bool
    rows_out: int
    reward_model_version: str | None
    """The reward model version that scored (None: no rows, and none was named)."""
    mean_score: float | None = None
    note: str | None = None


def relabel_step(
    ctx: StepContext, reward_model_version: str | None = None, traces_uri: str | None = None
) -> RelabelSummary:
    """Score the window's trace rows with the reward model and write the labels next to them."""
    df = window_traces(ctx, ctx.config.relabel.window_hours, traces_uri)
    uri = labels_uri(ctx)
    if df.empty:
        return RelabelSummary(
            ctx.scenario,
            ctx.run_key,
            rows_in=0,
            labels_uri=uri,
            dry_run=ctx.dry_run,
            rows_out=0,
            reward_model_version=reward_model_version,
            note="no captured traces in the window: nothing to relabel",
        )
    version, model = load_reward_model_version(ctx, reward_model_version)
    labels = relabel_frame(ctx.load_pack(), model, df, version)
    if not ctx.dry_run:
        ctx.storage.write_parquet(uri, labels)
    mean = round(float(labels["rm_score"].mean()), 6)
    return RelabelSummary(
        ctx.scenario, ctx.run_key, len(df), uri, ctx.dry_run, len(labels), reward_model_version=version, mean_score=mean
    )


def labelled_steps(
    services: StepServices, pack: Pack, window_hours: float, traces_uri: str | None = None
) -> tuple[torch.Tensor, ...] | None:
    """``(obs, masks, actions, scores)`` of the ``window_hours`` of traces joined with this run key's
    labels (None when either is missing) — the behaviour-cloning data."""
    import torch

    uri = labels_uri(services)
    if not services.storage.exists(uri):
        return None
    df = window_traces(services, window_hours, traces_uri)
    if df.empty:
        return None
    labels = services.storage.read_parquet(uri, columns=[*KEYS, "rm_score"])
    df = df.assign(episode_id=df["episode_id"].astype(str), step=df["step"].astype("int64"))
    joined = df.merge(labels, on=list(KEYS), how="inner", validate="one_to_one")
    if joined.empty:
        return None
    obs, masks, actions, _ = step_inputs(pack, joined)
    return obs, masks, actions, torch.from_numpy(joined["rm_score"].to_numpy("float32"))
