"""``rlops simulate``: the per-pack DAGs over simulated days against a scripted production world.

This module owns only the world, the clock and the traffic. Each 15-minute tick the production
stand-in (:class:`~rlops.timeline.world.ProductionWorld`) serves applicants
through the ``agent_sdk.PolicyClient`` — which follows the registry on the simulated clock — and
its traces go through the ``agent_sdk`` tracer into the landing zone; then every DAG of the pack
due at the tick's end runs through ``dag.test()`` with that logical date, followed by the runs it
triggered (:mod:`rlops.timeline.dag_driver`). Capture, drift, recalibration,
retrains, staging and the roll-out DAG's moves are the DAGs' own; this module only reads what they did.

Figures (the JSON's ``metrics``):

* ``detection_delay_h`` — per drift event, hours from its onset to the end of the first hourly
  window after the onset whose drift check alarmed (None: never detected);
* ``false_alarms`` — alarms that detect no new event, once the sandbox has been calibrated;
* ``emergency_retrains`` — full retrains triggered by an alarm;
* ``bad_candidate_promoted`` — whether a ``bad_candidate`` became champion;
* ``promotions`` / ``stage_moves`` / ``rolled_back`` — champion changes, roll-out stage moves
  (to the next share or to champion) and champions the roll-out DAG demoted; ``champion_regressions``
  — promotions after which live return fell (each one demoted by the roll-out DAG);
* ``ab_gates_run`` — live A/B gates the roll-out DAG judged (pass or fail, not skipped);
* ``retrains_skipped`` — scheduled retrains skipped because their inputs had not changed;
* ``promotion_to_agent_s`` — the longest simulated time from an alias move to the policy client
  serving it;
* ``rows_lost`` — landing-zone rows − accepted − quarantined;
* ``wall_s`` — the whole run; ``cpu_s`` — the CPU seconds this process used for it;
* ``fallback_episodes`` / ``challenger_episodes`` — production episodes the policy client answered
  with the rule engine / routed to the challenger; ``fallback_reasons`` — the client's fallback
  decisions per code (``no_champion`` before the first promotion, ``illegal_action``, …);
* ``outcome_detection_delay_h`` — per outcome event, as ``detection_delay_h`` (outcome drift);
* ``recovery_h``, ``mean_regret_share``, ``mean_regret`` — the served policy against the oracle and
  the rule engine on the same live episodes (:mod:`rlops.timeline.regret`);
* ``late_outcomes`` — with ``TimelineConfig.late_outcome``: the component, its delay, the episodes
  whose outcome settled late, the outcomes sent, those still pending at the end, and the outcome
  records the capture DAG read, accepted and quarantined (None without).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rlops.agent_sdk.batch import batch_policy, serving_version
from rlops.agent_sdk.policy_client import PolicyClient
from rlops.common.config import load_params, scenarios_dir
from rlops.common.run_key import RunKey
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.promotion.gates import SKIPPED, gate_state
from rlops.pipeline_steps.promotion.rollout import STAGE_MOVES
from rlops.registry.client import policy_model_name
from rlops.sandbox.traces import rollout_traces
from rlops.timeline.dag_driver import PackDags, airflow_home
from rlops.timeline.events import Event, check_reward_modules, in_force, reward_fn_in_force
from rlops.timeline.late_outcomes import LateOutcomes
from rlops.timeline.regret import RegretMeter, regret_metrics
from rlops.timeline.report import write_report
from rlops.timeline.world import (
    Hour,
    ProductionWorld,
    SimTracer,
    TimelineConfig,
    _environment,
    bad_candidate,
    simulation_params,
)

BASE_REWARD = "v1"
"""the reward the business scores with until a rule-change event (the built-in oracles are written for it)"""


class SimClock:
    """Simulated seconds since the timeline's start: the policy client's clock. The client polls
    the registry every ``every_s`` seconds on it (from ``phase_s`` after the start); traffic is served
    at the first poll of each tick, so a move made by the DAGs at the end of one tick reaches the
    agent at that poll of the next."""

    def __init__(self, t0: datetime, every_s: float, phase_s: float) -> None:
        self.t0, self.every_s, self.phase_s, self.now_s = t0, every_s, phase_s, 0.0

    def __call__(self) -> float:
        return self.now_s

    def seconds(self, when: datetime) -> float:
        return (when - self.t0).total_seconds()

    def first_poll_at_or_after(self, when: datetime) -> float:
        since = self.seconds(when) - self.phase_s
        return self.phase_s + max(0.0, -(-since // self.every_s)) * self.every_s


class _Run:
    def __init__(self, cfg: TimelineConfig, events: list[Event], root: Path, say: Callable[[str], None]) -> None:

        self.cfg, self.events, self.root, self.say = cfg, events, root, say
        self.ctx = StepContext.create(cfg.scenario)
        self.dags = PackDags(cfg.scenario, kinds=cfg.dags)
        self.world = ProductionWorld(self.ctx.pack_dir, root)
        self.tracer = SimTracer(self.ctx.traces.landing_uri)
        self.t0 = RunKey.parse(cfg.start).start
        self.clock = SimClock(self.t0, cfg.client_refresh_s, cfg.client_refresh_phase_s)
        self.client = PolicyClient(
            str(self.ctx.tracker.tracking_uri),
            cfg.scenario,
            self.ctx.pack_dir,
            challenger_fraction=cfg.challenger_fraction,
            refresh_every_s=cfg.client_refresh_s,
            clock=self.clock,
            exploration=self.ctx.config.exploration.share if cfg.exploration is None else cfg.exploration,
            exploration_distribution=self.ctx.config.exploration.distribution,
            no_exploration_segment=self.ctx.config.exploration.off_segment,
            seed=cfg.seed,
        )
        self.moves: list[tuple[str, str, float]] = []  # (alias, version, moved at): not served yet
        self.latencies_s: list[float] = []
        self.hours: list[Hour] = []
        self.rows = {"landing": 0, "accepted": 0, "quarantined": 0}
        self.outcome_records = {"records_in": 0, "records_accepted": 0, "records_quarantined": 0}
        self.calibrated = False
        self.detected: dict[int, float] = {}
        self.n = {
            "false_alarms": 0,
            "emergency": 0,
            "promotions": 0,
            "stage_moves": 0,
            "rolled_back": 0,
            "ab_gates_run": 0,
            "retrains_skipped": 0,
            "dag_runs": 0,
        }
        self.bad_versions: set[str] = set()
        self.registry = self._registry_state()

        self.regret = RegretMeter(oracle_reward=BASE_REWARD, reference_timesteps=cfg.reference_timesteps, seed=cfg.seed)
        self.late = (
            None
            if cfg.late_outcome is None
            else LateOutcomes(cfg.late_outcome, timedelta(hours=cfg.outcome_delay_hours))
        )

    # ---------------------------------------------------------------- production traffic
    def traffic(self, start: datetime) -> Any:
        """One tick of production traffic, decided by the policy client as it serves at the tick's
        first registry poll (:class:`SimClock`): the champion, the challenger on its share of request
        keys, the rule engine (with its ``fallback_reason``) where nothing is loaded or a decision is
        illegal; each row carries the propensity it was served with (``logp``). With a late outcome
        (``TimelineConfig.late_outcome``) the traced rows leave it out and the outcomes due by the
        tick's end are sent; the returned frame is the world's, every component scored."""
        import pandas as pd

        cfg = self.cfg
        key = f"{start:%Y%m%dT%H%M}-{cfg.tick_minutes}m"
        h = (start - self.t0).total_seconds() / 3600
        now = in_force(self.events, h)
        pack, scored_with = self.world.pack(now, self.events), reward_fn_in_force(now, BASE_REWARD)
        prefix = f"{cfg.scenario}-prod-{key}"
        self.clock.now_s = self.clock.first_poll_at_or_after(start)
        serving = self.client.poll()  # one consistent serving state for the tick
        routes = [serving.route(f"{prefix}-{i}", cfg.scenario) for i in range(cfg.episodes_per_tick)]
        frames = []
        for group in ("champion", "challenger"):
            n = routes.count(group)
            if not n:
                continue
            seed = int(start.timestamp()) // 60 * 1000 + (500 if group == "challenger" else 0) + cfg.seed
            frames.append(
                rollout_traces(
                    pack,
                    batch_policy(self.client, group, serving),
                    n,
                    seed=seed,
                    profile="live",
                    reward_fn=scored_with,
                    policy_version=serving_version(serving, group),
                    source="live",
                    start_ts=start,
                    test_group=group,
                    episode_prefix=f"{prefix}-{group}",
                )
            )
            self.regret.add(pack, seed, n, scored_with)  # the oracle and the rules on these episodes
        self.served_moves()
        df = pd.concat([f for f in frames if len(f)], ignore_index=True)
        traced = df if self.late is None else self.late.withhold(df)
        self.tracer.clock = start + timedelta(seconds=1)
        for rec in json.loads(traced.to_json(orient="records")):
            self.tracer.record(rec)
        if self.late is not None:
            self.late.deliver(self.tracer, cfg.scenario, until=start + timedelta(minutes=cfg.tick_minutes))
        self.tracer.flush()
        self.rows["landing"] += len(df)
        return df

    def served_moves(self) -> None:
        """Alias moves the client has now served: their promotion-to-agent latency, as the client
        measures it (:meth:`PolicyClient.promotion_to_agent_s`)."""
        pending = []
        for alias, version, moved_at in self.moves:
            latency = self.client.promotion_to_agent_s(version, moved_at, alias)
            if latency is None:
                pending.append((alias, version, moved_at))
            else:
                self.latencies_s.append(latency)
        self.moves = pending

    # ---------------------------------------------------------------- the DAGs, as scheduled
    def _registry_state(self) -> tuple[str | None, str | None]:
        """The versions behind ``champion`` and ``challenger`` (the policy client reads the
        challenger's share itself)."""
        aliases = self.ctx.tracker.aliases(policy_model_name(self.cfg.scenario))
        return aliases.get("champion"), aliases.get("challenger")

    def tick(self, i: int, hour: Hour) -> Any:
        cfg = self.cfg
        start = self.t0 + timedelta(minutes=i * cfg.tick_minutes)
        end = start + timedelta(minutes=cfg.tick_minutes)
        df = self.traffic(start)
        for kind in self.dags.due(end):
            outcomes = [self.dags.run(kind, end)]
            if kind == "drift_monitor":
                outcomes += self.dags.run_triggered()
            for out in outcomes:  # a triggered run is observed as what it is (its DAG's kind)
                self.observe(out.dag_id.split("__", 1)[0], out, hour, end)
        for e in self.events:
            if e.kind == "bad_candidate" and start <= self.t0 + timedelta(hours=e.at_hour) < end:
                self.offer_bad_candidate(hour, end)
        state = self._registry_state()
        for alias, old, new in zip(("champion", "challenger"), self.registry, state):
            if new is not None and new != old:  # an alias moved by this tick's DAG runs
                self.moves.append((alias, str(new), self.clock.seconds(end)))
        self.registry = state
        return df

    def observe(self, kind: str, out: Any, hour: Hour, when: datetime) -> None:
        """What a DAG run did, read from its tasks' results."""
        self.n["dag_runs"] += 1
        r = out.results
        if kind == "trace_capture":
            self.rows["accepted"] += int(r["capture"]["rows_accepted"])
            self.rows["quarantined"] += int(r["capture"]["rows_quarantined"])
            landed = r.get("capture_outcomes") or {}  # none: no outcome line landed in the interval
            for key in ("records_in", "records_accepted", "records_quarantined"):
                self.outcome_records[key] += int(landed.get(key) or 0)
        elif kind == "drift_monitor":
            self.drift(r, hour, when)
        elif kind == "rollout":
            move = out.rollout_move()
            judged = [g for g in move.get("ab_gates", []) if gate_state(g) != SKIPPED]
            self.n["ab_gates_run"] += len(judged)
            if move["action"] in STAGE_MOVES:
                self.n["stage_moves"] += 1
            if move["action"] == "finished":
                self.n["promotions"] += 1
            if move["action"] == "rolled_back":
                self.n["rolled_back"] += 1
            if move["action"] != "held":
                hour.actions.append(f"rollout v{move['version']} {move['action']}: {move['reason'][:80]}")
        elif kind in ("retrain_full", "retrain_incremental"):
            why = "emergency " if out.triggered else ""
            if out.triggered:
                self.n["emergency"] += 1
            res = out.promotion()
            if res is None:
                self.n["retrains_skipped"] += 1
                return
            version = (r.get("train_policy") or {}).get("model_version")
            outcome = (
                "promoted"
                if res.get("promoted")
                else f"challenger at {res['traffic_fraction']:.0%}"
                if res.get("action") == "challenger"
                else "kept champion"
            )
            self.n["promotions"] += int(bool(res.get("promoted")))
            hour.actions.append(f"{why}{kind} v{version} → {outcome}")

    def drift(self, r: dict[str, Any], hour: Hour, when: datetime) -> None:
        drift = r["detect_drift"]
        hour.drifted, hour.alarm = list(drift["drifted_fields"]), bool(drift["retrain"])
        if drift.get("report_uri"):
            rep = json.loads(self.ctx.storage.read_text(drift["report_uri"]))
            hour.p_values = {f["field"]: f.get("p_adjusted") for f in rep["fields"] if f.get("p_adjusted") is not None}
        if not hour.alarm:
            return
        h_end = (when - self.t0).total_seconds() / 3600
        new = [
            i
            for i, e in enumerate(self.events)
            if (e.drift or e.outcome) and e.at_hour < h_end and i not in self.detected
        ]
        for i in new:
            self.detected[i] = h_end - self.events[i].at_hour
        if not new and self.calibrated:
            self.n["false_alarms"] += 1
        self.calibrated = True
        hour.actions.append("recalibrated")

    def offer_bad_candidate(self, hour: Hour, when: datetime) -> None:
        """The world's deliberately worse candidate, offered through the promotion DAG."""
        ctx = StepContext.create(self.cfg.scenario, hour_key(self.t0, hour.hour))
        v = bad_candidate(ctx, self.cfg.seed + hour.hour)
        self.bad_versions.add(str(v))
        out = self.dags.run("promote", when, {"candidate": str(v), "requested_by": "timeline"})
        self.n["dag_runs"] += 1
        res = out.promotion() or {}
        hour.actions.append(f"bad candidate v{v} → {res.get('outcome')}")

    def hourly(self, h: int, df: Any) -> Hour:
        hour = self.hours[-1]
        returns = df.groupby("episode_id")["reward_total"].sum() if len(df) else None
        if returns is not None and len(returns) > 1:
            hour.live_return = float(returns.mean())
            hour.live_return_se = float(returns.std(ddof=1) / len(returns) ** 0.5)
        hour.episodes = int(df["episode_id"].nunique())
        hour.fallbacks = int(df.groupby("episode_id")["fallback"].any().sum()) if "fallback" in df else 0
        hour.challenger_episodes = int(df.loc[df["test_group"] == "challenger", "episode_id"].nunique())
        hour.champion = self.registry[0] or "rules"
        self.regret.close(hour)  # the oracle and the rule engine on this hour's live episodes
        return hour

    def run(self) -> dict[str, Any]:
        import pandas as pd

        ticks = 60 // self.cfg.tick_minutes
        champions_seen: list[str] = []
        for h in range(self.cfg.hours):
            t, cpu = time.monotonic(), time.process_time()
            self.hours.append(Hour(h, events=[e.label() for e in in_force(self.events, h + 1)]))
            df = pd.concat([self.tick(h * ticks + q, self.hours[-1]) for q in range(ticks)], ignore_index=True)
            hour = self.hourly(h, df)
            champions_seen.append(str(hour.champion))
            self.say(
                f"h{h:02d} return {_r(hour.live_return)} best {_r(hour.reference_return)} rules {_r(hour.rules_return)}"
                f" alarm={hour.alarm} champion={hour.champion} {'; '.join(hour.actions)} "
                f"({time.monotonic() - t:.0f}s, cpu {time.process_time() - cpu:.0f}s)"
            )
        self.client.close()
        drift_events = [e for e in self.events if e.drift]

        first_promotion = next((h.hour for h in self.hours if h.champion not in (None, "rules")), None)
        return {
            **regret_metrics(self.hours, self.events, first_promotion),
            "reference_trained": self.regret.trained,
            "detection_delay_h": [self.detected.get(self.events.index(e)) for e in drift_events],
            "outcome_detection_delay_h": [self.detected.get(i) for i, e in enumerate(self.events) if e.outcome],
            "false_alarms": self.n["false_alarms"],
            "emergency_retrains": self.n["emergency"],
            "drift_events": len(drift_events),
            "bad_candidate_promoted": bool(self.bad_versions & set(champions_seen)),
            "champion_regressions": self.n["rolled_back"],
            "rolled_back": self.n["rolled_back"],
            "promotions": self.n["promotions"],
            "stage_moves": self.n["stage_moves"],
            "ab_gates_run": self.n["ab_gates_run"],
            "retrains_skipped": self.n["retrains_skipped"],
            "dag_runs": self.n["dag_runs"],
            "promotion_to_agent_s": max(self.latencies_s, default=None),
            "rows_lost": self.rows["landing"] - self.rows["accepted"] - self.rows["quarantined"],
            "rows": dict(self.rows),
            "fallback_episodes": sum(h.fallbacks for h in self.hours),
            "fallback_reasons": dict(self.client.fallbacks),  # decisions per fallback code, as the client counted
            "challenger_episodes": sum(h.challenger_episodes for h in self.hours),
            "late_outcomes": None if self.late is None else {**self.late.metrics(), **self.outcome_records},
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def hour_key(t0: Any, h: int) -> str:
    return f"{t0 + timedelta(hours=h):%Y%m%dT%H%M}"


def run_timeline(
    cfg: TimelineConfig,
    events: list[Event],
    workdir: str | Path | None = None,
    say: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """Run the timeline in ``workdir`` (a fresh temporary folder by default); returns
    ``{metrics, hours, png, json, run_id, workdir}``."""
    import tempfile

    import yaml

    # an events file is data: the modules it names are refused before the pack is copied or imported
    check_reward_modules(events, scenarios_dir(load_params()) / cfg.scenario)
    t0, cpu0 = time.monotonic(), time.process_time()
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="rlops-timeline-"))
    root.mkdir(parents=True, exist_ok=True)
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(simulation_params(load_params(), root, cfg), sort_keys=False))
    with _environment(params_file, root, cfg.scenario):
        airflow_home(root / "airflow")
        import torch

        torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
        run = _Run(cfg, events, root, say)
        metrics = run.run()
        metrics["wall_s"] = round(time.monotonic() - t0, 1)
        metrics["cpu_s"] = round(time.process_time() - cpu0, 1)
        out = write_report(run.ctx, cfg, events, run.hours, metrics, root)
    return {"metrics": metrics, **out, "workdir": str(root)}


# ---------------------------------------------------------------------------- CLI
