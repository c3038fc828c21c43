"""Trace-store views of the console, computed once per content digest and cached.

The trace store's files of a scenario (uri, size, mtime) make a digest; the overview (policy
versions and their row counts, the trace-id index) and each version's decision map are computed
once per digest, kept in memory and written as JSON / ``.npz`` under
``<local_dir>/console-cache/<scenario>/``, so a restart does not recompute them either. A new
partition changes the digest and the next request recomputes.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import numpy as np
import pandas as pd

from rlops.console import aggregates as agg
from rlops.console.data import ProjectData

_MAP_MAX_FIT_ROWS = 200_000  # k-means is fitted on a sample of this many rows, then assigns every row


class NotFound(LookupError):
    """An input that names nothing: unknown scenario, version, trace id, run."""


class TraceViews:
    """Decision maps, the trace-id index and episode replays of one deployment."""

    def __init__(self, data: ProjectData) -> None:
        self.data = data
        self._memory: dict[tuple[str, ...], tuple[str, Any]] = {}
        self._locks: dict[tuple[str, ...], threading.Lock] = {}
        self._guard = threading.Lock()

    def _once(self, slot: tuple[str, ...], dg: str, compute: Any) -> Any:
        """The value of ``slot`` for content digest ``dg``: computed once (however many requests
        wait for it); a new digest replaces the slot's old value."""
        with self._guard:
            hit = self._memory.get(slot)
            if hit is not None and hit[0] == dg:
                return hit[1]
            lock = self._locks.setdefault(slot, threading.Lock())
        with lock:
            hit = self._memory.get(slot)
            if hit is None or hit[0] != dg:
                hit = (dg, compute())
                with self._guard:
                    self._memory[slot] = hit
            return hit[1]

    def files_digest(self, scenario: str) -> tuple[list[Any], str]:
        files = self.data.trace_files(scenario)
        return files, agg.digest([(f.uri, f.size, f.mtime_ns) for f in files])

    # ------------------------------------------------------------------ overview + index
    def overview(self, scenario: str) -> dict[str, Any]:
        """Row counts per policy version, and the trace-id index (hash → file, row)."""
        files, dg = self.files_digest(scenario)
        return self._once(("overview", scenario), dg, lambda: self._overview(scenario, files, dg))

    def _overview(self, scenario: str, files: list[Any], dg: str) -> dict[str, Any]:
        folder = self.data.cache_dir(scenario)
        meta_path, index_path = folder / f"overview-{dg}.json", folder / f"index-{dg}.npz"
        if meta_path.is_file() and index_path.is_file():
            with np.load(index_path) as z:
                index = {k: z[k] for k in z.files}
            return {**json.loads(meta_path.read_text()), "index": index}
        ids, fidx, ridx, counts = [], [], [], pd.Series(dtype="int64")
        for i, f in enumerate(files):
            t = self.data.read_trace_table(scenario, f.uri, ["trace_id", "policy_version"])
            ids.append(t["trace_id"].astype(str).to_numpy())
            fidx.append(np.full(len(t), i, dtype=np.int32))
            ridx.append(np.arange(len(t), dtype=np.int64))
            counts = counts.add(t["policy_version"].astype(str).value_counts(), fill_value=0)
        index = agg.build_index(np.concatenate(ids) if ids else np.array([], dtype=object),
                                np.concatenate(fidx) if fidx else np.array([], dtype=np.int32),
                                np.concatenate(ridx) if ridx else np.array([], dtype=np.int64))
        meta = {"digest": dg, "files": [f.uri for f in files], "rows": int(counts.sum()),
                "versions": {str(k): int(v) for k, v in counts.sort_values(ascending=False).items()}}
        for pattern in ("overview-*.json", "index-*.npz", "map-*.json"):  # earlier contents of the store
            for old in folder.glob(pattern):
                if dg not in old.name:
                    old.unlink(missing_ok=True)
        np.savez(index_path, **index)
        meta_path.write_text(json.dumps(meta))
        return {**meta, "index": index}

    # ------------------------------------------------------------------ decision map
    def decision_map(self, scenario: str, version: str) -> dict[str, Any]:
        ov = self.overview(scenario)
        if version not in ov["versions"]:
            raise NotFound(f"policy version {version!r} has no traces in the {scenario} trace store")
        k = self.data.section(scenario, "audit").clusters
        key = agg.digest([], ov["digest"], version, str(k), "map-1")
        return self._once(("map", scenario, version), key, lambda: self._cached_map(scenario, version, k, key, ov))

    def _cached_map(self, scenario: str, version: str, k: int, key: str, ov: dict[str, Any]) -> dict[str, Any]:
        path = self.data.cache_dir(scenario) / f"map-{ov['digest']}-{key}.json"
        if path.is_file():
            return json.loads(path.read_text())
        out = self._compute_map(scenario, version, k, ov["files"])
        path.write_text(json.dumps(out))
        return out

    def _version_rows(self, scenario: str, version: str, files: list[str]) -> pd.DataFrame:
        prefix = self.data.state_prefix()
        cols = ["trace_id", "episode_id", "step", "action", "action_mask", "reward_total", "reward_breakdown",
                "error", "policy_version"]
        parts = []
        for uri in files:
            schema = self.data.trace_schema(scenario, uri)
            want = cols + [c for c in schema if c.startswith(prefix)]
            parts.append(self.data.read_trace_table(scenario, uri, want, [("policy_version", "=", version)]))
        return agg.episode_order(pd.concat([p for p in parts if len(p)], ignore_index=True))

    def _compute_map(self, scenario: str, version: str, k: int, files: list[str]) -> dict[str, Any]:
        df = self._version_rows(scenario, version, files)
        X = self.data.state_features(scenario, df)
        rng = np.random.default_rng(7)
        fit = X if len(X) <= _MAP_MAX_FIT_ROWS else X[rng.choice(len(X), _MAP_MAX_FIT_ROWS, replace=False)]
        labels = agg.nearest(X, self.data.kmeans(fit, k, 7))
        comp, refs = self.data.components(df)
        reward = pd.to_numeric(df["reward_total"], errors="coerce").fillna(0.0)
        rtg_all = self.data.return_to_go(df, pd.concat([reward.rename("__total__"), comp], axis=1))
        rtg, comp_rtg = rtg_all["__total__"], rtg_all.drop(columns="__total__")
        errors = self.data.error_flags(df["error"]) if "error" in df.columns else np.zeros(len(df), bool)
        nodes = agg.node_stats(df, labels, reward, rtg, comp_rtg, refs, errors)
        for n in nodes:
            members = labels == n["cluster"]
            n["description"] = self.data.describe_cluster(scenario, df[members], df)
        edges = agg.top_edges(agg.transitions(df, labels))
        return {"scenario": scenario, "version": version, "rows": len(df), "episodes": int(df["episode_id"].nunique()),
                "low_threshold": float(rtg.quantile(agg.LOW_QUANTILE)), "nodes": nodes, "edges": edges}

    # ------------------------------------------------------------------ episode replay
    def episode(self, scenario: str, trace_id: str) -> dict[str, Any]:
        ov = self.overview(scenario)
        for file_no, row in agg.lookup(ov["index"], trace_id):
            uri = ov["files"][file_no]
            ids = self.data.read_trace_table(scenario, uri, ["trace_id", "episode_id"])
            if row < len(ids) and str(ids["trace_id"].iloc[row]) == trace_id:
                ep = str(ids["episode_id"].iloc[row])
                rows = self.data.read_trace_table(scenario, uri, None, [("episode_id", "=", ep)])
                return self._path(scenario, agg.episode_order(rows), trace_id)
        raise NotFound(f"trace id {trace_id!r} is not in the {scenario} trace store")

    def registry_version(self, scenario: str, version: str) -> str | None:
        """``credit_approval-policy/3`` or ``3`` → ``3``; anything else (``rules``) → None."""
        m = re.fullmatch(rf"(?:{re.escape(self.data.model_names(scenario)['policy'])}/)?(\d+)", version)
        return m.group(1) if m else None

    def _path(self, scenario: str, ep: pd.DataFrame, trace_id: str) -> dict[str, Any]:
        prefix = self.data.state_prefix()
        names = self.data.action_names(scenario)
        masks = self.data.mask_matrix(scenario, ep["action_mask"])
        version = str(ep["policy_version"].iloc[0])
        number = self.registry_version(scenario, version)
        probs = self.data.action_probabilities(scenario, number, ep) if number else None
        rules = {r["ref"]: r["title"] for fn in self.data.reward_functions(scenario) for r in fn["rule_refs"]}
        steps = []
        for i, r in enumerate(ep.to_dict("records")):
            legal = [names[a] for a in np.flatnonzero(masks[i])]
            if probs is not None:
                p = {names[a]: float(probs[i, a]) for a in np.flatnonzero(masks[i])}
            else:
                p = {str(r["action"]): float(np.exp(r["logp"]))} if _num(r.get("logp")) is not None else {}
            bd = json.loads(r["reward_breakdown"]).get("breakdown", []) if isinstance(r.get("reward_breakdown"), str) else []
            for b in bd:
                b["rule_title"] = rules.get(b.get("rule_ref") or "", "")
            steps.append({"step": int(r["step"]), "trace_id": str(r["trace_id"]), "ts": str(r.get("ts")),
                          "state": {c[len(prefix):]: _plain(v) for c, v in r.items()
                                    if c.startswith(prefix) and _plain(v) is not None},
                          "legal": legal, "action": str(r["action"]), "probabilities": p,
                          "reward_total": _num(r.get("reward_total")), "breakdown": bd,
                          "latency_ms": _num(r.get("latency_ms")), "error": _plain(r.get("error")),
                          "focus": str(r["trace_id"]) == trace_id})
        return {"trace_id": trace_id, "episode_id": str(ep["episode_id"].iloc[0]), "policy_version": version,
                "registry_version": number, "test_group": _plain(ep["test_group"].iloc[0]) if "test_group" in ep else None,
                "source": _plain(ep["source"].iloc[0]) if "source" in ep else None,
                "probability_source": (f"recomputed with {self.data.model_names(scenario)['policy']} v{number}"
                                       if probs is not None else "logged probability of the chosen action (logp)"),
                "episode_return": float(pd.to_numeric(ep["reward_total"], errors="coerce").sum()), "steps": steps}


def _plain(v: Any) -> Any:
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and np.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v


def _num(v: Any) -> float | None:
    v = _plain(v)
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None
