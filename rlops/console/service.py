"""Trace-store views of the console, computed once per content digest and cached.

The trace store's files of a scenario (uri, size, mtime) make a digest; the overview (policy
versions and their row counts) and each version's decision map are computed once per digest, kept
in memory and written as JSON under ``<local_dir>/console-cache/<scenario>/``, so a restart does not
recompute them either. A new partition changes the digest and the next request recomputes.

Every read goes through the trace store's reader (DuckDB over the partitions): the overview is one
``GROUP BY`` over the ``policy_version`` column, an episode replay a lookup by trace id (bloom
filters skip the row groups without it), and a decision map reads one version's rows, only the
columns it needs, and clusters at most ``audit.console_map_rows`` of them: larger versions are sampled by
whole episodes (a stable hash of the episode id), so return-to-go stays exact and a week of traffic
maps in seconds, in bounded memory.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import pandas as pd

from rlops.console import aggregates as agg
from rlops.console.data import ProjectData
from rlops.console.offpolicy import shadow_view
from rlops.pipeline_steps.labels.select import cluster_names

_MAP_MAX_FIT_ROWS = 200_000  # k-means is fitted on a sample of this many rows, then assigns every row
_REPLAYS_KEPT = 256  # episode replays kept in memory per console (for the store's current digest)
_MAP_MAX_ROWS = 50_000  # rows a map clusters without audit.console_map_rows (larger versions: sampled)


class NotFound(LookupError):
    """An input that names nothing: unknown scenario, version, trace id, run."""


class TraceViews:
    """Decision maps, the per-version overview and episode replays of one deployment."""

    def __init__(self, data: ProjectData) -> None:
        self.data = data
        self._memory: dict[tuple[str, ...], tuple[str, Any]] = {}
        self._locks: dict[tuple[str, ...], threading.Lock] = {}
        self._guard = threading.Lock()
        self._replays: OrderedDict[tuple[str, str], tuple[str, dict[str, Any]]] = OrderedDict()

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

    # ------------------------------------------------------------------ overview
    def overview(self, scenario: str) -> dict[str, Any]:
        """Row counts per policy version (most rows first)."""
        files, dg = self.files_digest(scenario)
        out: dict[str, Any] = self._once(("overview", scenario), dg, lambda: self._overview(scenario, files, dg))
        return out

    def _overview(self, scenario: str, files: list[Any], dg: str) -> dict[str, Any]:
        folder = self.data.cache_dir(scenario)
        meta_path = folder / f"overview-{dg}.json"
        if meta_path.is_file():
            out: dict[str, Any] = json.loads(meta_path.read_text())
            return out
        counts = (
            self.data.trace_reader(scenario).count_by(self.data.trace_uri(scenario), "policy_version") if files else {}
        )
        meta = {"digest": dg, "files": [f.uri for f in files], "rows": int(sum(counts.values())), "versions": counts}
        for pattern in ("overview-*.json", "index-*.npz", "map-*.json"):  # earlier contents of the store
            for old in folder.glob(pattern):
                if dg not in old.name:
                    old.unlink(missing_ok=True)
        meta_path.write_text(json.dumps(meta))
        return meta

    # ------------------------------------------------------------------ decision map
    def decision_map(self, scenario: str, version: str) -> dict[str, Any]:
        ov = self.overview(scenario)
        if version not in ov["versions"]:
            raise NotFound(f"policy version {version!r} has no traces in the {scenario} trace store")
        audit = self.data.section(scenario, "audit")
        k, max_rows = int(audit.get("clusters", 8)), int(audit.get("console_map_rows", _MAP_MAX_ROWS))
        key = agg.digest([], ov["digest"], version, str(k), str(max_rows), "map-2")
        view: dict[str, Any] = self._once(
            ("map", scenario, version), key, lambda: self._cached_map(scenario, version, k, max_rows, key, ov)
        )
        return view

    def _cached_map(
        self, scenario: str, version: str, k: int, max_rows: int, key: str, ov: dict[str, Any]
    ) -> dict[str, Any]:
        path = self.data.cache_dir(scenario) / f"map-{ov['digest']}-{key}.json"
        if path.is_file():
            result: dict[str, Any] = json.loads(path.read_text())
            return result
        out = self._compute_map(scenario, version, k, max_rows, int(ov["versions"][version]))
        path.write_text(json.dumps(out))
        return out

    def _version_rows(self, scenario: str, version: str, max_rows: int, total: int) -> pd.DataFrame:
        """The version's rows (the columns a map needs), or a sample of whole episodes past ``max_rows``."""
        prefix = self.data.state_prefix()
        reader, uri = self.data.trace_reader(scenario), self.data.trace_uri(scenario)
        cols = [
            "trace_id",
            "episode_id",
            "step",
            "action",
            "action_mask",
            "reward_total",
            "reward_breakdown",
            "error",
            "policy_version",
        ]
        want = cols + [c for c in reader.columns(uri) if c.startswith(prefix)]
        rows, _ = reader.sample_episodes(uri, max_rows, columns=want, where={"policy_version": version}, total=total)
        return agg.episode_order(rows)

    def _compute_map(self, scenario: str, version: str, k: int, max_rows: int, total: int) -> dict[str, Any]:
        df = self._version_rows(scenario, version, max_rows, total)
        sampled = len(df) < total
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
        prefix = self.data.state_prefix()
        names = cluster_names(
            [
                (path, kind, df[prefix + path])
                for path, kind, _ in self.data.state_fields(scenario)
                if prefix + path in df.columns
            ],
            labels,
        )
        for n in nodes:
            members = labels == n["cluster"]
            n["name"] = names.get(n["cluster"], f"cluster {n['cluster']}")
            n["description"] = self.data.describe_cluster(scenario, df[members], df)
        edges = agg.top_edges(agg.transitions(df, labels))
        episodes = int(df["episode_id"].nunique())
        return {
            "scenario": scenario,
            "version": version,
            "rows": total,
            "episodes": round(episodes * total / max(len(df), 1)) if sampled else episodes,
            "sampled_rows": len(df) if sampled else None,
            "sampled_episodes": episodes if sampled else None,
            "low_threshold": float(rtg.quantile(agg.LOW_QUANTILE)),
            "nodes": nodes,
            "edges": edges,
        }

    # ------------------------------------------------------------------ shadow candidates
    def shadow(self, scenario: str) -> dict[str, Any]:
        """Each shadow candidate's agreement with the served decisions and its off-policy estimate
        (:func:`rlops.console.offpolicy.shadow_view`), once per content digest."""
        files, dg = self.files_digest(scenario)
        out: dict[str, Any] = self._once(("shadow", scenario), dg, lambda: shadow_view(self.data, scenario, files, dg))
        return out

    # ------------------------------------------------------------------ episode replay
    def episode(self, scenario: str, trace_id: str) -> dict[str, Any]:
        """The decision path of ``trace_id``'s episode: a lookup by id in the store (bloom filters
        skip the row groups without it); the last replays of the current digest are kept in memory."""
        _, dg = self.files_digest(scenario)
        key = (scenario, trace_id)
        with self._guard:
            hit = self._replays.get(key)
            if hit is not None and hit[0] == dg:
                self._replays.move_to_end(key)
                return hit[1]
        try:
            rows = self.data.trace_reader(scenario).episode_rows(self.data.trace_uri(scenario), trace_id)
        except LookupError:
            raise NotFound(f"trace id {trace_id!r} is not in the {scenario} trace store") from None
        episode_id = str(rows.loc[rows["trace_id"].astype(str) == trace_id, "episode_id"].iloc[0])
        path = self._path(scenario, agg.episode_order(rows[rows["episode_id"].astype(str) == episode_id]), trace_id)
        with self._guard:
            self._replays[key] = (dg, path)
            while len(self._replays) > _REPLAYS_KEPT:
                self._replays.popitem(last=False)
        return path

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
            bd = agg.breakdown_items(r.get("reward_breakdown"))
            for b in bd:
                b["rule_title"] = rules.get(b.get("rule_ref") or "", "")
            steps.append(
                {
                    "step": int(r["step"]),
                    "trace_id": str(r["trace_id"]),
                    "ts": str(r.get("ts")),
                    "state": {
                        c[len(prefix) :]: _plain(v)
                        for c, v in r.items()
                        if c.startswith(prefix) and _plain(v) is not None
                    },
                    "legal": legal,
                    "action": str(r["action"]),
                    "probabilities": p,
                    "reward_total": _num(r.get("reward_total")),
                    "breakdown": bd,
                    "latency_ms": _num(r.get("latency_ms")),
                    "error": _plain(r.get("error")),
                    "focus": str(r["trace_id"]) == trace_id,
                }
            )
        return {
            "trace_id": trace_id,
            "episode_id": str(ep["episode_id"].iloc[0]),
            "policy_version": version,
            "units": {path: unit for path, _, unit in self.data.state_fields(scenario) if unit},
            "registry_version": number,
            "test_group": _plain(ep["test_group"].iloc[0]) if "test_group" in ep else None,
            "source": _plain(ep["source"].iloc[0]) if "source" in ep else None,
            "probability_source": (
                f"recomputed with {self.data.model_names(scenario)['policy']} v{number}"
                if probs is not None
                else "logged probability of the chosen action (logp)"
            ),
            "episode_return": float(pd.to_numeric(ep["reward_total"], errors="coerce").sum()),
            "steps": steps,
        }


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
