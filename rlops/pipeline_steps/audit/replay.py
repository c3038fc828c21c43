"""``rlops replay`` and ``rlops audit``: why does the agent do what it does?

replay (``rlops replay --trace-id ID [--depth N]``)
    Finds the episode holding the trace id in the trace store and prints its decision path up to
    that step (the last ``depth`` steps when given): each step's visible state, the legal actions,
    the action probabilities and the reward breakdown. Probabilities are recomputed with the
    policy version recorded in the row when that version can be loaded (a registered version of
    ``<scenario>-policy`` or a saved policy folder); otherwise only the chosen action's
    probability is known, from ``logp``.

audit (``rlops audit [--policy-version V]``)
    Clusters the window's states (k-means on the encoded state, as the label queue does) and per
    cluster reports what the states look like, the most frequent actions with the mean and
    standard deviation of their step reward and of their return-to-go (the reward still to come
    in the episode, so delayed outcomes count), and which reward components drive the low scores:
    among the cluster's steps in its bottom quartile of return-to-go, how often each component
    is the most negative contribution. An HTML page (tables and an embedded chart) and the JSON
    go to ``reports/audit/<scenario>/<run_key>/`` and to MLflow.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.errors import RlopsError, UserError
from rlops.common.policy_ref import PolicyRef
from rlops.data_contracts.shapes import read_breakdown
from rlops.pipeline_steps.audit.attribution import attribute, episode_outcomes, render
from rlops.pipeline_steps.infra.html import html_page, html_table, png_base64
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.infra.policy_loader import load_policy_ref
from rlops.pipeline_steps.labels.select import kmeans
from rlops.pipeline_steps.training.relabel import KEYS, labels_uri
from rlops.registry import tags as T
from rlops.trace_store.states import STATE_PREFIX, mask_matrix, observations_from_traces, state_features

if TYPE_CHECKING:  # numpy, pandas, torch are imported where they run: registering the CLI stays light
    import numpy as np
    import pandas as pd

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import Pack
    from rlops.trace_store.query import TraceReader

_LOW_QUANTILE = 0.25


# --------------------------------------------------------------------------- replay
def find_episode(reader: TraceReader, uri: str, trace_id: str) -> pd.DataFrame:
    """All rows of the episode(s) holding ``trace_id``, sorted by episode and step: a lookup by id
    that reads only the row groups whose bloom filter may hold it."""
    try:
        return reader.episode_rows(uri, trace_id)
    except LookupError as exc:
        raise ValueError(str(exc).strip("'\"")) from None


def screen_rows(pack: Pack, df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``(usable rows, one reason per skipped row)``: a stored row whose action, action mask or step
    does not fit the pack (written by hand, by another version, around the contract) is skipped
    by the audit tools with its reason, never a reason to refuse the whole store. The usable rows'
    ``step`` is an integer column: one file of the store holding it as text makes the whole column
    text when the files are read together."""
    import numpy as np
    import pandas as pd

    names = pack.scenario.action_names
    n = len(names)
    mask = df["action_mask"].astype("string").fillna("") if "action_mask" in df else None
    action = df["action"].astype("string").fillna("") if "action" in df else None
    step = (
        pd.to_numeric(df["step"], errors="coerce").astype("Float64").to_numpy(dtype=float, na_value=np.nan)
        if "step" in df
        else None
    )
    bad = np.zeros(len(df), dtype=bool)
    reasons: list[str] = []
    if mask is not None:
        wrong = ~mask.str.fullmatch(r"[01]*1[01]*").fillna(False).to_numpy() | (mask.str.len() != n).to_numpy()
        bad |= wrong
    if action is not None:
        bad |= ~action.isin(list(names)).to_numpy()
    if step is not None:
        with np.errstate(invalid="ignore"):
            bad |= ~(np.isfinite(step) & (step % 1 == 0))
    for i in np.flatnonzero(bad)[:1000]:
        what = []
        if step is not None and not (np.isfinite(step[i]) and step[i] % 1 == 0):
            what.append(f"step {df['step'].iloc[i]!r} (not a whole number)")
        if mask is not None and (len(mask.iloc[i]) != n or "1" not in mask.iloc[i] or set(mask.iloc[i]) - {"0", "1"}):
            what.append(f"action_mask {mask.iloc[i]!r} (expected {n} '0'/'1' characters, one legal)")
        if action is not None and action.iloc[i] not in names:
            what.append(f"action {action.iloc[i]!r} (not an action of {pack.name})")
        reasons.append(f"trace {df['trace_id'].iloc[i] if 'trace_id' in df else i}: " + ", ".join(what))
    out = df.loc[~bad]
    if step is not None:
        out = out.assign(step=step[~bad].astype(np.int64))
    return out, reasons


def decision_path(
    ctx: StepContext, pack: Pack, rows: pd.DataFrame, trace_id: str, depth: int | None = None
) -> dict[str, Any]:
    """The steps of ``trace_id``'s episode up to its (last) matching step, at most ``depth`` of them."""
    import numpy as np
    import pandas as pd

    ep = str(rows.loc[rows["trace_id"].astype(str) == trace_id, "episode_id"].iloc[-1])
    episode, skipped = screen_rows(pack, rows[rows["episode_id"].astype(str) == ep])
    # the store sorted the steps as it holds them: as text when any file holds them as text
    episode = episode.sort_values("step", kind="stable").reset_index(drop=True)
    if not (episode["trace_id"].astype(str) == trace_id).any():
        raise UserError(f"replay --trace-id {trace_id}: its stored row cannot be replayed: {skipped[0]}")
    focus = int(episode.loc[episode["trace_id"].astype(str) == trace_id, "step"].max())
    shown = episode[episode["step"] <= focus]
    if depth is not None:
        shown = shown.tail(max(int(depth), 1))
    probs, source = _probabilities(ctx, pack, episode)
    names = pack.scenario.action_names
    masks = mask_matrix(episode["action_mask"], pack.scenario.n_actions)
    steps = []
    for i in shown.index:
        r = episode.loc[i]
        state = {
            c[len(STATE_PREFIX) :]: _plain(r[c])
            for c in episode.columns
            if c.startswith(STATE_PREFIX) and not _missing(r[c])
        }
        if probs is not None:
            p = {names[a]: round(float(probs[i, a]), 4) for a in np.flatnonzero(masks[i])}
        else:
            p = {str(r["action"]): round(math.exp(float(r["logp"])), 4)} if not _missing(r.get("logp")) else {}
        bd = read_breakdown(r.get("reward_breakdown"))  # a row of no known shape shows no breakdown
        steps.append(
            {
                "step": int(r["step"]),
                "trace_id": str(r["trace_id"]),
                "ts": str(r.get("ts")),
                "state": state,
                "legal": [names[a] for a in np.flatnonzero(masks[i])],
                "action": str(r["action"]),
                "probabilities": p,
                "probability_source": source,
                "reward_total": _plain(r.get("reward_total")),
                "breakdown": bd,
                "latency_ms": _plain(r.get("latency_ms")),
                "error": _plain(r.get("error")),
                "done": _plain(r.get("done")),
            }
        )
    return {
        "trace_id": trace_id,
        "episode_id": ep,
        "policy_version": str(episode["policy_version"].iloc[0]),
        "episode_steps": len(episode),
        "shown_steps": len(steps),
        "rows_skipped": skipped,
        "episode_return": float(pd.to_numeric(episode["reward_total"], errors="coerce").sum()),
        "steps": steps,
    }


def _probabilities(ctx: StepContext, pack: Pack, episode: pd.DataFrame) -> tuple[np.ndarray | None, str]:
    import torch

    version = str(episode["policy_version"].iloc[0])
    try:
        ref = PolicyRef.parse(version, ctx.scenario) if not Path(version).is_dir() else Path(version)
    except RlopsError:
        return None, f"logp of the chosen action (policy {version!r} is not a registered policy)"
    if isinstance(ref, PolicyRef) and ref.is_rules:
        return None, "logp of the chosen action (served by the rule engine, which has no network)"
    try:
        loaded = load_policy_ref(ctx, ref)
    except Exception:  # noqa: BLE001 - deleted or unreachable: show the recorded logp instead
        loaded = None
    if loaded is None:
        return None, "logp of the chosen action (policy version not loadable)"
    policy = loaded.network
    obs, masks = observations_from_traces(pack, episode)
    with torch.no_grad():
        logp, _ = policy(obs, masks)
    return logp.exp().numpy(), f"recomputed with policy version {version}"


def render_path(path: dict[str, Any]) -> str:
    lines = [
        f"episode {path['episode_id']} (policy {path['policy_version']}), steps {path['shown_steps']} of "
        f"{path['episode_steps']}, episode return {path['episode_return']:.4f}"
    ]
    for s in path["steps"]:
        lines.append(f"\nstep {s['step']}  trace {s['trace_id']}  action {s['action']}  reward {s['reward_total']}")
        lines.append("  state: " + ", ".join(f"{k}={v}" for k, v in s["state"].items()))
        lines.append("  legal: " + ", ".join(s["legal"]))
        lines.append(
            "  probabilities: "
            + ", ".join(f"{k} {v:.3f}" for k, v in sorted(s["probabilities"].items(), key=lambda kv: -kv[1]))
            + f"  ({s['probability_source']})"
        )
        for b in s["breakdown"]:
            lines.append(
                f"    {b['score']:+.4f}  {b['component']:<18} {b.get('reason') or ''} [{b.get('rule_ref') or '-'}]"
            )
    return "\n".join(lines)


def replay(ctx: StepContext, trace_id: str, depth: int | None = None, traces_uri: str | None = None) -> dict[str, Any]:
    pack = ctx.load_pack()
    rows = find_episode(ctx.traces.reader, traces_uri or ctx.traces.scenario_uri(ctx.scenario), trace_id)
    return decision_path(ctx, pack, rows, trace_id, depth)


# --------------------------------------------------------------------------- audit
def component_frame(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str | None]]:
    """Per-row component scores (one column per component) and each component's rule ref."""
    return component_records(df.index, [read_breakdown(text) for text in df["reward_breakdown"].tolist()])


def component_records(index: pd.Index, rows: list[list[dict[str, Any]]]) -> tuple[pd.DataFrame, dict[str, str | None]]:
    """:func:`component_frame` of rows whose breakdowns are already read (one list of items each)."""
    import pandas as pd

    refs: dict[str, str | None] = {}
    recs = []
    for items in rows:
        recs.append({b["component"]: float(b["score"]) for b in items})
        for b in items:
            refs.setdefault(b["component"], b.get("rule_ref"))
    comp = pd.DataFrame.from_records(recs, index=index).fillna(0.0) if recs else pd.DataFrame(index=index)
    return comp, refs


def to_go(df: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """Per row, the sum of ``values`` from that step to the end of its episode."""
    order = df.sort_values(["episode_id", "step"], ascending=[True, False], kind="stable").index
    return values.loc[order].groupby(df.loc[order, "episode_id"].to_numpy()).cumsum().reindex(df.index)


def describe_cluster(pack: Pack, rows: pd.DataFrame, everything: pd.DataFrame, top: int = 4) -> list[str]:
    """The few fields that set a cluster apart, in words."""
    import pandas as pd

    scored = []
    for f in pack.scenario.spec.fields:
        col = STATE_PREFIX + f.path
        if col not in rows.columns or not f.observed:
            continue
        c, a = rows[col].dropna(), everything[col].dropna()
        if c.empty or a.empty:
            continue
        if f.type in ("int", "float"):
            cn, an = pd.to_numeric(c), pd.to_numeric(a)
            spread = float(an.std()) or 1.0
            scored.append(
                (
                    0.4 * abs(float(cn.median()) - float(an.median())) / spread,
                    f"{f.path} ≈ {float(cn.median()):.4g} (overall {float(an.median()):.4g})",
                )
            )
        else:
            mode = c.astype(str).mode().iloc[0]
            share, base = float((c.astype(str) == mode).mean()), float((a.astype(str) == mode).mean())
            scored.append((share - base, f"{f.path} = {mode} ({share:.0%} here, {base:.0%} overall)"))
    ranked = sorted(scored, key=lambda s: -s[0])
    # a quarter of a standard deviation, or ten points of share: below that it is not what sets
    # the cluster apart (the first field is always kept so every cluster gets a description)
    return [text for i, (score, text) in enumerate(ranked[:top]) if i == 0 or score >= 0.1]


def audit_clusters(
    pack: Pack,
    df: pd.DataFrame,
    clusters: int = 8,
    seed: int = 7,
    top_actions: int = 3,
) -> list[dict[str, Any]]:
    import pandas as pd

    labels, _ = kmeans(state_features(pack, df), clusters, seed)
    comp, refs = component_frame(df)
    reward = pd.to_numeric(df["reward_total"], errors="coerce").fillna(0.0)
    rtg_all = to_go(df, pd.concat([reward.rename("__total__"), comp], axis=1))
    rtg, comp_rtg = rtg_all["__total__"], rtg_all.drop(columns="__total__")
    out = []
    for c in sorted(set(labels.tolist())):
        idx = df.index[labels.numpy() == c]
        rows = df.loc[idx]
        acts: list[dict[str, Any]] = []
        for action, g in rows.groupby("action").groups.items():
            r, t = reward.loc[g], rtg.loc[g]
            acts.append(
                {
                    "action": str(action),
                    "steps": len(g),
                    "share": len(g) / len(idx),
                    "mean_reward": float(r.mean()),
                    "std_reward": float(r.std(ddof=0)),
                    "mean_return_to_go": float(t.mean()),
                    "std_return_to_go": float(t.std(ddof=0)),
                }
            )
        acts = sorted(acts, key=lambda a: -a["steps"])[:top_actions]
        low = idx[rtg.loc[idx] <= rtg.loc[idx].quantile(_LOW_QUANTILE)]
        drivers = []
        if len(low) and not comp_rtg.empty:
            worst = comp_rtg.loc[low].idxmin(axis=1)[comp_rtg.loc[low].min(axis=1) < 0]
            for name, n in worst.value_counts().head(3).items():
                drivers.append(
                    {
                        "component": name,
                        "rule_ref": refs.get(name),
                        "share_of_low_steps": n / len(low),
                        "mean_in_low_steps": float(comp_rtg.loc[low, name].mean()),
                        "mean_in_cluster": float(comp_rtg.loc[idx, name].mean()),
                    }
                )
        out.append(
            {
                "cluster": int(c),
                "states": len(idx),
                "share": len(idx) / len(df),
                "description": describe_cluster(pack, rows, df),
                "mean_return_to_go": float(rtg.loc[idx].mean()),
                "low_threshold": float(rtg.loc[idx].quantile(_LOW_QUANTILE)),
                "low_steps": len(low),
                "top_actions": acts,
                "drivers": drivers,
            }
        )
    return sorted(out, key=lambda c: -c["states"])


def audit_chart(clusters: list[dict[str, Any]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, means, stds = [], [], []
    for c in clusters:
        for a in c["top_actions"]:
            labels.append(f"cluster {c['cluster']}: {a['action']}")
            means.append(a["mean_return_to_go"])
            stds.append(a["std_return_to_go"])
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(labels) + 1.2))
    ax.barh(
        range(len(labels)),
        means,
        xerr=stds,
        color=["#C44E52" if m < 0 else "#4C72B0" for m in means],
        alpha=0.85,
        capsize=2,
    )
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="#444", lw=0.8)
    ax.set_xlabel("mean return-to-go (± std) after taking the action")
    ax.set_title("What each action earns, per state cluster")
    try:
        return png_base64(fig)
    finally:
        plt.close(fig)


def render_audit_html(report: dict[str, Any]) -> str:
    meta = report["meta"]
    parts = [
        f"<p>{meta['rows']:,} steps of {meta['episodes']:,} episodes"
        + (f", policy version <b>{meta['policy_version']}</b>" if meta.get("policy_version") else "")
        + f", window {meta.get('window') or 'all'}. States are grouped into {len(report['clusters'])} clusters of "
        "similar situations. <i>Return-to-go</i> is the reward still to come in the episode after the step.</p>",
        f"<img alt='mean return-to-go per action and cluster' src='data:image/png;base64,{report['chart']}'/>",
    ]
    for c in report["clusters"]:
        parts.append(
            f"<h2>Cluster {c['cluster']} — {c['states']:,} steps ({c['share']:.0%})</h2><ul>"
            + "".join(f"<li>{d}</li>" for d in c["description"])
            + "</ul>"
        )
        parts.append(
            html_table(
                c["top_actions"],
                ["action", "steps", "share", "mean_reward", "std_reward", "mean_return_to_go", "std_return_to_go"],
            )
        )
        if c["drivers"]:
            parts.append(
                f"<p>Low scores (return-to-go ≤ {c['low_threshold']:.3g}, {c['low_steps']} steps) are "
                "driven by:</p>"
                + html_table(
                    [{**d, "share_of_low_steps": f"{d['share_of_low_steps']:.0%}"} for d in c["drivers"]],
                    ["component", "rule_ref", "share_of_low_steps", "mean_in_low_steps", "mean_in_cluster"],
                )
            )

    parts.append(render(report.get("attribution")))
    return html_page(f"Policy audit — {meta['scenario']}", "".join(parts))


def _attribution(ctx: StepContext, pack: Pack, df: pd.DataFrame, clusters: int, seed: int) -> dict[str, Any] | None:
    """Sparse-outcome attribution (see :mod:`rlops.pipeline_steps.audit.attribution`), scored by the run
    key's reward-model labels when the relabel step wrote them."""
    if episode_outcomes(df) is None:
        return None
    scores, source = None, "the scripted reward (no reward-model labels for this run key)"
    uri = labels_uri(ctx)
    if ctx.storage.exists(uri):
        labels = ctx.storage.read_parquet(uri, columns=[*KEYS, "rm_score", "reward_model_version"])
        keyed = df[list(KEYS)].astype({"episode_id": str}).assign(step=df["step"].astype("int64"))
        joined = keyed.merge(labels, on=list(KEYS), how="left")
        if joined["rm_score"].notna().all():
            scores = joined["rm_score"].to_numpy()
            source = f"reward model v{joined['reward_model_version'].iloc[0]}"
    labels_c, _ = kmeans(state_features(pack, df), clusters, seed)
    return attribute(pack, df, scores, labels_c.numpy(), source)


def audit(ctx: StepContext, policy_version: str | None = None, traces_uri: str | None = None) -> dict[str, Any]:
    cfg = ctx.config.audit
    pack = ctx.load_pack()
    window = ctx.key.lookback(cfg.window_hours)
    uri = traces_uri or ctx.traces.scenario_uri(ctx.scenario)
    df = ctx.traces.reader.read(
        uri,
        window if not traces_uri else None,
        where={"policy_version": str(policy_version)} if policy_version is not None else None,
    )
    if df.empty:
        raise ValueError(
            f"no trace rows under {uri}"
            + (f" for policy version {policy_version}" if policy_version else "")
            + (f" in the window {window[0]} – {window[1]}" if window and not traces_uri else "")
        )
    max_rows = cfg.max_rows
    if len(df) > max_rows:  # sample whole episodes so return-to-go stays exact
        eps = df["episode_id"].drop_duplicates().sample(frac=max_rows / len(df), random_state=cfg.seed)
        df = df[df["episode_id"].isin(eps)]
    df, skipped = screen_rows(pack, df)
    if df.empty:
        raise ValueError(f"no usable trace rows under {uri}: {len(skipped)} skipped, e.g. {skipped[0]}")
    df = df.reset_index(drop=True)
    clusters = audit_clusters(pack, df, cfg.clusters, cfg.seed)
    meta = {
        "scenario": ctx.scenario,
        "run_key": ctx.run_key,
        "policy_version": policy_version,
        "traces_uri": uri,
        "window": [str(w) for w in window] if window and not traces_uri else None,
        "rows": len(df),
        "episodes": int(df["episode_id"].nunique()),
        "rows_skipped": len(skipped),
        "skipped_examples": skipped[:10],
    }
    report = {
        "meta": meta,
        "clusters": clusters,
        "chart": audit_chart(clusters),
        "attribution": _attribution(ctx, pack, df, cfg.clusters, cfg.seed),
    }
    json_uri, html_uri = ctx.report_uri("audit", "report.json"), ctx.report_uri("audit", "report.html")
    result = {
        "report_uri": json_uri,
        "html_uri": html_uri,
        "clusters": len(clusters),
        "rows": len(df),
        "rows_skipped": len(skipped),
        "warnings": [f"row skipped: {r}" for r in skipped[:10]],
        "dry_run": ctx.dry_run,
        "run_id": None,
    }
    if ctx.dry_run:
        return result
    page = render_audit_html(report)
    body = {k: v for k, v in report.items() if k != "chart"}
    ctx.storage.write_json(json_uri, body)
    ctx.storage.write_text(html_uri, page)

    with step_run(ctx, T.AUDIT) as run:
        run.log_params({"policy_version": policy_version or "", "traces_uri": uri, "report_uri": json_uri})
        run.log_metrics(
            {f"audit.cluster_return/{c['cluster']}": c["mean_return_to_go"] for c in clusters}
            | {"audit.rows": float(len(df))},
            step=0,
        )
        run.log_dict(body, "audit/report.json")
        run.log_text(page, "audit/report.html")
        result["run_id"] = run.run_id
    return result


def _missing(v: Any) -> bool:
    import pandas as pd

    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def _plain(v: Any) -> Any:
    if _missing(v):
        return None
    return v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v
