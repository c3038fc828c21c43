"""``rlops simulate``: run the loop over simulated days and measure it (see
:mod:`rlops.pipeline_steps.orchestration.timeline` for the world and the schedule).

Figures (the JSON's ``metrics``):

* ``detection_delay_h`` — per drift event, hours from its onset to the end of the first hourly
  window after the onset whose drift check alarmed (None: never detected);
* ``false_alarms`` — alarms that detect no new event, once the sandbox has been calibrated;
* ``emergency_retrains`` — full retrains triggered by an alarm;
* ``bad_candidate_promoted`` — whether a ``bad_candidate`` became champion;
* ``champion_regressions`` — promotions after which the next hour's live return fell by more than
  ``evaluate.segment_tolerance`` (and three standard errors); each one is rolled back;
* ``rows_lost`` — landing-zone rows − accepted − quarantined;
* ``wall_s`` — the whole run; ``cpu_s`` — the CPU seconds this process used for it (a figure that a
  machine shared with other work does not inflate, as it does ``wall_s``);
* ``fallback_episodes`` / ``challenger_episodes`` — production episodes the policy client answered
  with the rule engine / routed to the challenger;
* ``outcome_detection_delay_h`` — per outcome event, as ``detection_delay_h`` (outcome drift);
* ``recovery_h``, ``mean_regret_share``, ``mean_regret`` — the served policy against the oracle and
  the rule engine on the same live episodes (:mod:`rlops.pipeline_steps.orchestration.regret`).
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from rlops.pipeline_steps.orchestration.events import Event, in_force, reward_version
from rlops.pipeline_steps.orchestration.timeline import Hour, TimelineConfig


class _Run:
    def __init__(self, cfg: TimelineConfig, events: list[Event], root: Path, say: Callable[[str], None]) -> None:
        from rlops.agent_sdk.policy_client import PolicyClient
        from rlops.common.run_key import RunKey
        from rlops.pipeline_steps.infra.context import StepContext
        from rlops.pipeline_steps.orchestration import tasks
        from rlops.pipeline_steps.orchestration.timeline import ProductionWorld, SimTracer
        self.cfg, self.events, self.root, self.say = cfg, events, root, say
        self.tasks = tasks
        self.conf = tasks.validate_conf({"scenario": cfg.scenario, "reward_fn": "v1", "timesteps": cfg.full_timesteps,
                                         "mode": "full", "dry_run": False})
        self.ctx = StepContext.create(cfg.scenario)
        self.world = ProductionWorld(self.ctx.pack_dir, root)
        self.tracer = SimTracer(self.ctx.traces.landing_uri)
        self.client = PolicyClient(str(self.ctx.tracker.tracking_uri), cfg.scenario, self.ctx.pack_dir,
                                   challenger_fraction=cfg.challenger_fraction)
        self.t0 = RunKey.parse(cfg.start).start
        self.hours: list[Hour] = []
        self.rows = {"landing": 0, "accepted": 0, "quarantined": 0}
        self.calibrated = False
        self.detected: dict[int, float] = {}
        self.false_alarms = self.emergency = self.regressions = 0
        self.bad_promoted = False
        self.promotions: list[dict[str, Any]] = []
        from rlops.pipeline_steps.orchestration.regret import RegretMeter
        self.regret = RegretMeter()

    # ---------------------------------------------------------------- production traffic
    def traffic(self, h: int, q: int) -> Any:
        import pandas as pd

        from rlops.common.run_key import RunKey
        from rlops.sandbox.traces import rollout_traces
        from rlops.pipeline_steps.orchestration.timeline import client_policy, no_policy_fallback
        cfg = self.cfg
        start = self.t0 + timedelta(hours=h, minutes=q * cfg.tick_minutes)
        key = RunKey.between(start, start + timedelta(minutes=cfg.tick_minutes))
        now = in_force(self.events, h + q * cfg.tick_minutes / 60)
        pack, scored_with = self.world.pack(now, self.events), reward_version(now, "v1")
        prefix = f"{cfg.scenario}-prod-{key}"
        routes = [self.client.route(f"{prefix}-{i}") for i in range(cfg.episodes_per_tick)]
        frames = []
        for group in ("champion", "challenger"):
            n = routes.count(group)
            if not n:
                continue
            loaded = self.client.policies.get(group)
            policy, version = ((client_policy(loaded.model), f"{cfg.scenario}-policy/{loaded.version}")
                               if loaded else (no_policy_fallback, "rules"))
            seed = int(start.timestamp()) // 60 * 1000 + (500 if group == "challenger" else 0) + cfg.seed
            frames.append(rollout_traces(pack, policy, n, seed=seed, profile="live", reward_version=scored_with,
                                         policy_version=version, source="live", start_ts=start,
                                         test_group="challenger" if group == "challenger" else "control",
                                         episode_prefix=f"{prefix}-{group}"))
            self.regret.add(pack, seed, n, scored_with)  # the oracle and the rules on these episodes
        df = pd.concat([f for f in frames if len(f)], ignore_index=True)
        self.tracer.clock = start + timedelta(seconds=1)
        for rec in json.loads(df.to_json(orient="records")):
            self.tracer.record(rec)
        self.tracer.flush()
        self.rows["landing"] += len(df)
        res = self.tasks.capture({**self.conf, "run_key": str(key)})
        self.rows["accepted"] += int(res["rows_accepted"])
        self.rows["quarantined"] += int(res["rows_quarantined"])
        return df

    # ---------------------------------------------------------------- the hourly DAGs
    def retrain(self, conf: dict[str, Any], mode: str, why: str, hour: Hour) -> dict[str, Any]:
        steps = self.cfg.full_timesteps if mode == "full" else self.cfg.incremental_timesteps
        trained = self.tasks.train_policy({**conf, "timesteps": steps}, mode)
        stressed = self.tasks.stress_test(conf, trained)
        # A scheduled candidate, and the first policy to replace the rule engine, roll out staged;
        # an emergency retrain replaces a stale champion at once.
        staged = self.cfg.staged_rollout and (mode == "incremental" or "champion" not in self.client.policies)
        return self.promote(conf, trained, stressed, f"{why}: v{trained.get('model_version')}", hour, staged)

    def promote(self, conf: dict[str, Any], trained: dict[str, Any], stressed: dict[str, Any], what: str,
                hour: Hour, staged: bool = False) -> dict[str, Any]:
        res = self.tasks.evaluate_and_promote(conf, trained, stressed, staged=staged)
        staged_to = res.get("traffic_fraction") if res.get("action") == "challenger" else None
        outcome = ("promoted" if res.get("promoted") else
                   f"challenger at {staged_to:.0%}" if staged_to is not None else "kept champion")
        hour.actions.append(f"{what} → {outcome}")
        if res.get("promoted"):
            self.promotions.append({"hour": hour.hour, "version": str(trained["model_version"])})
        if res.get("promoted") or res.get("action") == "challenger":
            self.client.refresh()
        return res

    def advance_challenger(self, conf: dict[str, Any], hour: Hour) -> None:
        """The staged roll-out's next step: the challenger is evaluated again (its live A/B
        traffic included) and moves to the next traffic share, or to champion."""
        challenger = self.client.policies.get("challenger")
        if challenger is None:
            return
        trained = {"model_version": challenger.version}
        res = self.promote(conf, trained, {}, f"challenger v{challenger.version}", hour, staged=True)
        if not res.get("promoted") and res.get("action") != "challenger":
            from rlops.pipeline_steps.infra.registry import CHALLENGER, policy_model_name
            self.ctx.tracker.delete_alias(policy_model_name(self.cfg.scenario), CHALLENGER)  # failed: no traffic
            self.client.refresh()

    def check_regression(self, hour: Hour) -> None:
        """A promotion at the end of the previous hour made live return fall: roll it back."""
        from rlops.pipeline_steps.promotion.evaluate import rollback
        if len(self.hours) < 2 or not self.promotions or self.promotions[-1]["hour"] != hour.hour - 1:
            return
        prev = self.hours[-2]
        if prev.live_return is None or hour.live_return is None or any(
                (e.drift or e.outcome) and hour.hour <= e.at_hour < hour.hour + 1 for e in self.events):
            return
        margin = float(self.ctx.section("evaluate").get("segment_tolerance", 0.05))
        se = ((prev.live_return_se or 0) ** 2 + (hour.live_return_se or 0) ** 2) ** 0.5
        drop = prev.live_return - hour.live_return
        if drop > margin and drop > 3 * se:
            self.regressions += 1
            from rlops.pipeline_steps.infra.context import StepContext
            res = rollback(StepContext.create(self.cfg.scenario, hour_key(self.t0, hour.hour)))
            hour.actions.append(f"rollback → v{res['champion']} (live return fell {drop:.3f})")
            self.client.refresh()

    def hourly(self, h: int, df: Any) -> Hour:
        from rlops.pipeline_steps.infra.context import StepContext
        from rlops.pipeline_steps.orchestration.timeline import bad_candidate
        hour = Hour(h, events=[e.label() for e in in_force(self.events, h + 1)])
        returns = df.groupby("episode_id")["reward_total"].sum() if len(df) else None
        if returns is not None and len(returns) > 1:
            hour.live_return = float(returns.mean())
            hour.live_return_se = float(returns.std(ddof=1) / len(returns) ** 0.5)
        hour.episodes = int(df["episode_id"].nunique())
        hour.fallbacks = int(df.groupby("episode_id")["fallback"].any().sum()) if "fallback" in df else 0
        hour.challenger_episodes = int(df.loc[df["test_group"] == "challenger", "episode_id"].nunique())
        self.regret.close(hour)
        self.hours.append(hour)
        self.check_regression(hour)
        conf = {**self.conf, "run_key": hour_key(self.t0, h)}
        drift = self.tasks.detect_drift(conf)
        hour.drifted, hour.alarm = list(drift["drifted_fields"]), bool(drift["retrain"])
        if drift.get("report_uri"):
            rep = json.loads(self.ctx.storage.read_text(drift["report_uri"]))
            hour.p_values = {f["field"]: f.get("p_adjusted") for f in rep["fields"] if f.get("p_adjusted") is not None}
        if hour.alarm:
            new = [i for i, e in enumerate(self.events) if (e.drift or e.outcome) and e.at_hour < h + 1
                   and i not in self.detected]
            for i in new:
                self.detected[i] = h + 1 - self.events[i].at_hour
            if not new and self.calibrated:
                self.false_alarms += 1
            self.tasks.recalibrate(conf, drift)
            self.calibrated = True
            self.emergency += 1
            hour.actions.append("recalibrated")
            self.retrain(conf, "full", "emergency retrain_full", hour)
        else:
            self.advance_challenger(conf, hour)
            if (h + 1) % self.cfg.incremental_every_h == 0:
                self.retrain(conf, "incremental", "retrain_incremental", hour)
        for e in self.events:
            if e.kind == "bad_candidate" and h <= e.at_hour < h + 1:
                v = bad_candidate(StepContext.create(self.cfg.scenario, conf["run_key"]), self.cfg.seed + h)
                stressed = self.tasks.stress_test(conf, {"model_version": v})
                res = self.promote(conf, {"model_version": v}, stressed, f"bad candidate v{v}", hour)
                self.bad_promoted = self.bad_promoted or bool(res.get("promoted"))
        hour.champion = self.client.policies["champion"].version if "champion" in self.client.policies else "rules"
        return hour

    def run(self) -> dict[str, Any]:
        import pandas as pd
        for h in range(self.cfg.hours):
            t, cpu = time.monotonic(), time.process_time()
            df = pd.concat([self.traffic(h, q) for q in range(60 // self.cfg.tick_minutes)], ignore_index=True)
            hour = self.hourly(h, df)
            self.say(f"h{h:02d} return {hour.live_return if hour.live_return is None else round(hour.live_return, 3)}"
                     f" alarm={hour.alarm} champion={hour.champion} {'; '.join(hour.actions)} "
                     f"({time.monotonic() - t:.0f}s, cpu {time.process_time() - cpu:.0f}s)")
        self.client.close()
        drift_events = [e for e in self.events if e.drift]
        from rlops.pipeline_steps.orchestration.regret import regret_metrics
        regret = regret_metrics(self.hours, self.events, self.promotions[0]["hour"] if self.promotions else None)
        return {**regret, "detection_delay_h": [self.detected.get(self.events.index(e)) for e in drift_events],
                "false_alarms": self.false_alarms, "emergency_retrains": self.emergency,
                "drift_events": len(drift_events), "bad_candidate_promoted": self.bad_promoted,
                "outcome_detection_delay_h": [self.detected.get(i) for i, e in enumerate(self.events) if e.outcome],
                "champion_regressions": self.regressions,
                "rows_lost": self.rows["landing"] - self.rows["accepted"] - self.rows["quarantined"],
                "rows": dict(self.rows), "promotions": len(self.promotions),
                "fallback_episodes": sum(h.fallbacks for h in self.hours),
                "challenger_episodes": sum(h.challenger_episodes for h in self.hours)}


def hour_key(t0: Any, h: int) -> str:
    return f"{t0 + timedelta(hours=h):%Y%m%dT%H%M}"


def run_timeline(cfg: TimelineConfig, events: list[Event], workdir: str | Path | None = None,
                 say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run the timeline in ``workdir`` (a fresh temporary folder by default); returns
    ``{metrics, hours, png, json, run_id, workdir}``."""
    import tempfile

    import yaml

    from rlops.common.config import load_params
    from rlops.pipeline_steps.orchestration.timeline import _environment, simulation_params
    from rlops.pipeline_steps.orchestration.timeline_report import write_report
    t0, cpu0 = time.monotonic(), time.process_time()
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="rlops-timeline-"))
    root.mkdir(parents=True, exist_ok=True)
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(simulation_params(load_params(), root, cfg), sort_keys=False))
    with _environment(params_file, root):
        import torch
        torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
        run = _Run(cfg, events, root, say)
        metrics = run.run()
        metrics["wall_s"] = round(time.monotonic() - t0, 1)
        metrics["cpu_s"] = round(time.process_time() - cpu0, 1)
        out = write_report(run.ctx, cfg, events, run.hours, metrics, root)
    return {"metrics": metrics, **out, "workdir": str(root)}


# ---------------------------------------------------------------------------- CLI
