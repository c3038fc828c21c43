"""``rlops trace-capture``: one interval of traces into the validated trace store.

Two sources, one contract:

* **landing zone** (production): the JSON-lines files live agents wrote through
  ``agent_sdk.Tracer`` for the interval are compacted by :func:`capture_landing_zone`;
* **simulation** (no live agent yet, demos, shadow runs) — only when asked (``--simulate``, the
  capture DAG's ``simulate`` conf, or ``capture.simulate_when_empty``): the ``champion`` policy
  (or the pack's rule engine while there is none) runs in a named simulation profile, ``live`` by
  default, and a ``sample_rate`` fraction of its episodes is recorded, as a live sampler would.
  The result records ``source: simulation:<profile>`` (the rows stand in for live traffic, so
  they carry the contract's ``live``/``sandbox`` source); episode ids are ``<scenario>-<run key>-<i>``, so they never collide across captures.

Either way every row is validated against the scenario's trace contract (Great Expectations);
rows that break it go to quarantine with their reason, and rows in = accepted + quarantined.
The interval is the run key's (:class:`~common.run_key.RunKey`); its files are named after the
run key, so a re-run overwrites them.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline_steps.infra.context import StepContext

if TYPE_CHECKING:
    from sandbox.pack import Pack
    from sandbox.traces import TracePolicy


def contract_for(pack: "Pack") -> Any:
    from data_contracts.schema import trace_contract
    return trace_contract(pack.name, pack.scenario.action_names, pack.scenario.spec.fields)


def champion_trace_policy(ctx: StepContext, pack: "Pack") -> tuple["TracePolicy", str]:
    """The champion as a tracing policy (sampled actions with logp/entropy/value), or the rule
    engine when no champion is registered yet."""
    from sandbox.policies import rule_policy
    try:
        from pipeline_steps.training.policy import champion_policy
        version, policy = champion_policy(ctx, Path(tempfile.mkdtemp(prefix="rlops-champion-")))
    except Exception as exc:  # noqa: BLE001 - a registry outage must not stop capture
        ctx.extra.setdefault("warnings", []).append(f"champion unavailable ({exc}); traced the rule engine")
        version, policy = None, None
    if policy is None:
        return rule_policy, "rules"
    import torch
    gen = torch.Generator().manual_seed(int(ctx.params.get("seed", 0)))

    def act(env: Any) -> Any:
        out = policy.act(env.observe(), deterministic=False, generator=gen)
        return out.action, {"logp": out.logp, "entropy": out.entropy, "value": out.value}
    return act, f"{ctx.scenario}-policy/{version}"


def capture_step(ctx: StepContext, simulate: bool | None = None, episodes: int | None = None,
                 sample_rate: float | None = None, profile: str | None = None) -> dict[str, Any]:
    """Capture the run key's interval. ``simulate=None`` uses the landing zone when it has files
    for the interval and falls back to simulation when ``capture.simulate_when_empty`` is on."""
    from pipeline_steps.capture.core import capture_landing_zone
    from sandbox.profiles import default_profile
    cfg = ctx.section("capture")
    pack = ctx.load_pack()
    store = ctx.traces
    landing, traces, quarantine = store.landing_uri, store.trace_uri, store.quarantine_uri
    start, end = ctx.key.start, ctx.key.end
    has_files = bool(store.landing_files(ctx.scenario, ctx.key))
    if simulate is None:  # simulated traffic is never stored as live unless the configuration asks
        simulate = not has_files and bool(cfg.get("simulate_when_empty", False))
    base = {"scenario": ctx.scenario, "run_key": ctx.run_key, "interval": [start.isoformat(), end.isoformat()],
            "dry_run": ctx.dry_run}
    if not simulate:
        res = capture_landing_zone(ctx.storage, landing, traces, ctx.scenario, contract_for(pack), start, end,
                                   chunk_rows=int(cfg.get("chunk_rows", 100_000)), dry_run=ctx.dry_run,
                                   quarantine_root_uri=quarantine, run_key=ctx.run_key)
        return {**base, "source": "landing_zone", **_counts(res.rows_in, res.rows_accepted, res.rows_quarantined),
                "partitions": res.partitions, "quarantine_uri": res.quarantine_uri}
    return {**base, **simulate_capture(ctx, pack, traces, quarantine, start,
                                       int(episodes or cfg.get("episodes", 2000)),
                                       float(sample_rate if sample_rate is not None else cfg.get("sample_rate", 1.0)),
                                       default_profile(pack, "production", profile or cfg.get("profile")))}


def _counts(rows_in: int, accepted: int, quarantined: int) -> dict[str, int]:
    if rows_in != accepted + quarantined:  # the invariant every capture keeps
        raise RuntimeError(f"capture lost rows: {rows_in} in, {accepted} accepted, {quarantined} quarantined")
    return {"rows_in": rows_in, "rows_accepted": accepted, "rows_quarantined": quarantined}


def simulate_capture(ctx: StepContext, pack: "Pack", traces: str, quarantine: str, start: datetime,
                     episodes: int, sample_rate: float, profile: str) -> dict[str, Any]:
    from pipeline_steps.capture.core import validate_rows
    from pipeline_steps.infra.trace_store import (episode_prefix, write_quarantine_partitions,
                                                  write_trace_partitions)
    from sandbox.traces import rollout_traces
    if profile not in pack.scenario.profiles:
        raise ValueError(f"capture profile '{profile}': pack {pack.name} has {sorted(pack.scenario.profiles)}")
    policy, version = champion_trace_policy(ctx, pack)
    # Seed and ids derive from the run key: each interval sees other applicants, ids never collide
    # across run keys, and re-running a run key reproduces its rows.
    seed = int(start.timestamp()) // 60 * 1000
    df = rollout_traces(pack, policy, episodes, seed=seed, profile=profile,
                        reward_version=ctx.reward_choice().reward_fn, policy_version=version,
                        source="live" if profile == "live" else "sandbox", start_ts=start, sample_rate=sample_rate,
                        episode_prefix=episode_prefix(ctx.scenario, ctx.run_key))
    contract = contract_for(pack)
    accepted, quarantined = validate_rows(df, contract)
    parts = write_trace_partitions(ctx.storage, accepted, traces, ctx.run_key, contract=contract,
                                   dry_run=ctx.dry_run)
    qparts = write_quarantine_partitions(ctx.storage, quarantined, quarantine, ctx.scenario, ctx.run_key,
                                         fallback_ts=start, dry_run=ctx.dry_run) if len(quarantined) else []
    return {"source": f"simulation:{profile}", "policy_version": version, "episodes": episodes,
            "sample_rate": sample_rate, **_counts(len(df), len(accepted), len(quarantined)),
            "partitions": parts, "quarantine_partitions": qparts, "warnings": ctx.extra.get("warnings", [])}


def add_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace-capture", help="landing zone (or simulated champion traffic) → validated trace store")
    p.add_argument("--scenario", default=None)
    p.add_argument("--run-key", default=None, help="interval start YYYYmmddTHHMM (default: now)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--simulate", dest="simulate", action="store_true", default=None,
                     help="run the champion in a simulation profile instead of reading the landing zone")
    src.add_argument("--landing-zone", dest="simulate", action="store_false")
    p.add_argument("--episodes", type=int, default=None)
    p.add_argument("--sample-rate", type=float, default=None)
    p.add_argument("--profile", default=None)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    ctx = StepContext.create(args.scenario, args.run_key, args.dry_run)
    res = capture_step(ctx, args.simulate, args.episodes, args.sample_rate, args.profile)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        verb = "would write" if ctx.dry_run else "wrote"
        print(f"{res['source']}: {res['rows_in']} rows in, {res['rows_accepted']} accepted, "
              f"{res['rows_quarantined']} quarantined; {verb} {len(res['partitions'])} partition file(s)")
    return 0
