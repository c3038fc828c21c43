"""``rlops audit [--policy-version V]``: what does the agent do, situation by situation?

Clusters the window's states (k-means on the encoded state, as the label queue does) and per
cluster reports what the states look like, the most frequent actions with the mean and standard
deviation of their step reward and of their return-to-go (the reward still to come in the episode,
so delayed outcomes count), and which reward components drive the low scores: among the cluster's
steps in its bottom quartile of return-to-go, how often each component is the most negative
contribution. An HTML page (tables and an embedded chart) and the JSON go to
``reports/audit/<scenario>/<run_key>/`` and to MLflow. One trace's decision path is
:mod:`rlops.pipeline_steps.audit.replay`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rlops.common.step_result import StepResult
from rlops.pipeline_steps.audit.attribution import attribute, episode_outcomes, render
from rlops.pipeline_steps.audit.rows import component_frame, screen_rows, to_go
from rlops.pipeline_steps.infra.html import html_page, html_table, png_base64
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.labels.select import kmeans
from rlops.pipeline_steps.training.relabel import KEYS, labels_uri
from rlops.registry import tags as T
from rlops.trace_store.states import STATE_PREFIX, state_features

if TYPE_CHECKING:  # pandas and matplotlib are imported where they run: registering the CLI stays light
    import pandas as pd

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack

_LOW_QUANTILE = 0.25


@dataclass(frozen=True)
class AuditResult(StepResult):
    """What an audit found, in numbers, and where its report is."""

    report_uri: str
    """The JSON report (a dry run names where it would be written)."""
    html_uri: str
    clusters: int
    """State clusters reported."""
    rows: int
    """Trace rows audited (after sampling whole episodes down to ``audit.max_rows``)."""
    rows_skipped: int
    """Rows that do not fit the pack, left out."""
    warnings: list[str]
    """The first skipped rows, each with its reason."""
    dry_run: bool
    run_id: str | None
    """The MLflow run holding the report (None: a dry run)."""


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
    clusters: int,
    seed: int,
    top_actions: int = 3,
) -> list[dict[str, Any]]:
    """Per state cluster (largest first): its share, description, top actions and the drivers of its
    low scores (see the module)."""
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
    """The mean return-to-go (± std) of each cluster's top actions, as a base64 PNG."""
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
    """The report as one self-contained HTML page."""
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


def _attribution(ctx: StepServices, pack: Pack, df: pd.DataFrame, clusters: int, seed: int) -> dict[str, Any] | None:
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
    section = attribute(pack, df, scores, labels_c.numpy(), source)
    return None if section is None else section.as_dict()


def audit(ctx: StepContext, policy_version: str | None = None, traces_uri: str | None = None) -> AuditResult:
    """The audit of the run key's window (or of every row under ``traces_uri``), of one policy version
    when given; writes and logs its report unless the run is dry."""
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
    result = AuditResult(
        report_uri=json_uri,
        html_uri=html_uri,
        clusters=len(clusters),
        rows=len(df),
        rows_skipped=len(skipped),
        warnings=[f"row skipped: {r}" for r in skipped[:10]],
        dry_run=ctx.dry_run,
        run_id=None,
    )
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
        run_id = run.run_id
    return replace(result, run_id=run_id)
