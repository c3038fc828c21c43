"""Soak the real stack: ``rlops stack up`` with two packs at a compressed cadence, an agent process
serving traffic through ``PolicyClient`` into the landing zone, the production stand-in changed twice
mid-run (an input drift, then an outcome change), and the scheduler plus the worker running a training
killed with SIGKILL mid-training and restarted (``rlops stack up`` again).

Everything runs through the product a user runs: the stack command, the per-pack DAGs on Airflow's own
scheduler (no run is triggered by hand), the MLflow server, the SDK in a separate agent process. The
bench only watches (the REST API, the registry, the agent's own account of what it served) and kills.

Prints progress, then ONE JSON line: ``scheduler_minutes``, ``dag_runs`` (by state), ``lost_triggers``,
``failed_not_by_kill``, ``seconds_without_champion`` (after each pack's first promotion),
``promotion_to_agent_s`` (max), ``rows_in`` / ``rows_accepted`` / ``rows_quarantined`` (the captures),
``rows_written`` (the agent), ``world_changes``, ``world_changes_answered`` (a champion trained after
the change serves), ``world_changes_judged`` and ``world_change_outcomes`` (per change, the candidates
trained after it and the gates' verdict on each: a change the champion already handles is answered
by keeping it), ``cpu_s_per_pack_hour``, ``wall_s``, and the load average at start and end.

    python bench/stack_soak.py [--minutes 75] [--packs credit_approval,complaint_handling] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.soak_watch import Watcher  # noqa: E402
from rlops.common.config import REPO_ROOT, deep_merge  # noqa: E402

# The production stand-in's changes, per pack, at a share of the run: an input drift the drift
# monitor sees, then a change of what follows a decision that the pack's recalibration can learn from
# live traces, so a retrain can be trained against it. Credit's is an outcome change (it fits default
# odds on its loan outcomes). Complaint has no fit for its hidden resolution odds; its second change is
# the phone API slowing down (follow-up calls take 6x as long), which the traces' latencies show: a
# retrain calls back less and beats the champion without completing fewer cases or handing more to
# people (bench/soak_changes.py), where a failing billing API was answered only by escalating, which
# the gates refuse. Both land after the first champion and early enough for two scheduled retrains
# and a roll-out after them.
WORLD_CHANGES: dict[str, list[dict[str, Any]]] = {
    "credit_approval": [
        {"at": 0.25, "kind": "population", "init": {"user_profile.age": {"dist": "normal", "mean": 58, "std": 10}}},
        {
            "at": 0.4,
            "kind": "outcome",
            "field": "hidden.default_prob",
            "factor": 2.5,
            "when": "user_profile.age >= 60",
        },
    ],
    "complaint_handling": [
        {
            "at": 0.25,
            "kind": "population",
            "init": {"customer.sentiment": {"dist": "normal", "mean": -0.7, "std": 0.3}},
        },
        {"at": 0.4, "kind": "latency", "action": "follow_up", "factor": 6},
    ],
}


PORTS = ("airflow", "mlflow", "console", "webhook")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def soak_params(workdir: Path, packs: list[str], cadence: int) -> dict[str, Any]:
    """The project's params with everything under ``workdir`` and the DAGs at a compressed cadence:
    capture and roll-out every ``cadence`` minutes, drift every 2, full retrains every 3 cadences, the
    off-policy gate's window 3 cadences."""
    import yaml

    base = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    every = lambda n: f"*/{n} * * * *"  # noqa: E731
    return deep_merge(
        base,
        {
            "scenario": packs[0],
            "storage": {"root": f"file://{workdir / 'data'}"},
            "tracking": {"uri": f"sqlite:///{workdir / 'mlflow.db'}", "artifact_root": str(workdir / "mlartifacts")},
            "label_queue": {"db_url": f"sqlite:///{workdir / 'queue.db'}"},
            "capture": {"simulate_when_empty": False},
            "dags": {
                "trace_capture": every(cadence),
                "drift_monitor": every(2 * cadence),
                "label_queue": None,
                "retrain_incremental": None,
                "retrain_full": every(3 * cadence),
                "rollout": every(cadence),
                "unpaused": [f"*__{p}" for p in packs],
            },
            "rollout": {"min_stage_minutes": 2 * cadence, "regression_window_hours": 4 * cadence / 60},
            # the off-policy gate reads the traffic of the world a retrain answers, as the calibration
            # does: 24 hours would be every episode since the start, from before and after each change
            "ope": {"window_hours": 3 * cadence / 60},
            "stack": {"home": str(workdir / "stack"), **{f"{part}_port": free_port() for part in PORTS}},
        },
    )


def agent_main(args: argparse.Namespace) -> None:
    """The agent process: every ``tick_s`` each pack's production stand-in serves ``episodes`` episodes
    decided by ``PolicyClient`` (champion, challenger on its share, the rule engine as fallback) and
    the SDK tracer writes them to the landing zone. Its account goes to ``status`` (JSON)."""
    from rlops.agent_sdk.batch import batch_policy, serving_version
    from rlops.agent_sdk.policy_client import PolicyClient
    from rlops.agent_sdk.tracer import Tracer
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.traces import rollout_traces
    from rlops.timeline.events import Event, in_force
    from rlops.timeline.world import ProductionWorld

    t0, minutes, status_file = float(args.t0), float(args.minutes), Path(args.status)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    agents = {}
    for pack in args.packs.split(","):
        ctx = StepContext.create(pack)
        events = [Event(c["at"] * minutes / 60, c["kind"], {k: v for k, v in c.items() if k not in ("at", "kind")})
                  for c in WORLD_CHANGES[pack]]  # fmt: skip
        agents[pack] = {
            "client": PolicyClient(
                os.environ["MLFLOW_TRACKING_URI"], pack, ctx.pack_dir, refresh_every_s=15, clock=time.time, seed=7
            ),  # fmt: skip
            "world": ProductionWorld(ctx.pack_dir, Path(args.workdir) / f"world-{pack}"),
            "events": events,
        }
    tracer = Tracer(StepContext.create(args.packs.split(",")[0]).traces.landing_uri, flush_interval_s=None)
    account: dict[str, Any] = {"rows_written": 0, "served": {}, "ticks": 0}
    tick = 0
    while not stop["now"]:
        started = time.time()
        for pack, a in agents.items():
            now_h = (started - t0) / 3600
            world = a["world"].pack(in_force(a["events"], now_h), a["events"])
            serving = a["client"].poll()
            routes = [serving.route(f"{pack}-soak-{tick}-{i}", pack) for i in range(args.episodes)]
            for group in ("champion", "challenger"):
                n = routes.count(group)
                if not n:
                    continue
                seed = tick * 1000 + (500 if group == "challenger" else 0)
                df = rollout_traces(
                    world,
                    batch_policy(a["client"], group, serving),
                    n,
                    seed=seed,
                    profile="live",
                    policy_version=serving_version(serving, group),
                    source="live",
                    test_group=group,
                    episode_prefix=f"{pack}-soak-{tick}-{group}",
                )
                for rec in json.loads(df.to_json(orient="records")):
                    tracer.record(rec)
                account["rows_written"] += len(df)
            for alias, policy in serving.policies.items():
                first = a["client"].first_served_at(policy.ref, alias)
                if first is not None:
                    account["served"].setdefault(f"{pack}|{alias}|{policy.ref}", first)
        tracer.flush()
        tick += 1
        account["ticks"] = tick
        status_file.write_text(json.dumps(account))
        time.sleep(max(0.0, args.tick_s - (time.time() - started)))
    tracer.flush()
    status_file.write_text(json.dumps(account))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=75.0, help="scheduler time to soak (default 75)")
    ap.add_argument("--packs", default="credit_approval,complaint_handling")
    ap.add_argument("--cadence", type=int, default=5, help="minutes between captures (default 5)")
    ap.add_argument("--episodes", type=int, default=40, help="episodes per pack per agent tick")
    ap.add_argument("--tick-s", type=float, default=20.0, help="seconds between agent ticks")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--t0", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--status", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.agent:
        return agent_main(args)
    packs = [p for p in args.packs.split(",") if p]
    unknown = [p for p in packs if p not in WORLD_CHANGES]
    if len(packs) < 1 or unknown or args.minutes < 5 or args.cadence < 1:
        ap.error(
            f"--packs must name packs of {sorted(WORLD_CHANGES)} (got {unknown or packs}); "
            "--minutes >= 5; --cadence >= 1"
        )
    import tempfile

    import yaml

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlops-soak-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "params.yaml").write_text(yaml.safe_dump(soak_params(workdir, packs, args.cadence)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLOPS_"))}
    env.update(RLOPS_HOME=str(workdir), RLOPS_PARAMS=str(workdir / "params.yaml"))
    watcher = Watcher(workdir, env, packs, args.minutes, say=lambda s: print(s, flush=True))
    print(f"load average at start: {os.getloadavg()}; workdir {workdir}", flush=True)
    watcher.up()
    status = workdir / "agent-status.json"
    agent = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--agent",
            "--packs",
            ",".join(packs),
            "--minutes",
            str(args.minutes),
            "--t0",
            str(watcher.t0),
            "--status",
            str(status),
            "--episodes",
            str(args.episodes),
            "--tick-s",
            str(args.tick_s),
            "--workdir",
            str(workdir),
        ],  # fmt: skip
        env={**env, **watcher.stack_env()},
        stdout=open(workdir / "agent.log", "ab"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
    )
    try:
        watcher.run(agent, status)
    except KeyboardInterrupt:  # ended early by hand: count what ran, then take the stack down
        print("interrupted: counting what ran so far", flush=True)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agent.kill()
    try:
        # what the agent wrote last is captured at the next tick or two: wait for it, then count
        drained = watcher.drain(time.time(), timeout_s=(3 * args.cadence + 5) * 60)
        result = watcher.result(json.loads(status.read_text()) if status.exists() else {}, WORLD_CHANGES)
        result["all_rows_captured_before_the_count"] = drained
    finally:
        watcher.down()
    result["load_start"], result["load_end"] = watcher.load_start, list(os.getloadavg())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
