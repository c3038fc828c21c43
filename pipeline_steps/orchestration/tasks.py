"""What the Airflow tasks call: conf validation, then one step each.

DAG files import this module inside their tasks (never at parse time). Every function takes the
validated conf (a small dict) and returns a small dict for XCom: URIs, counts, versions — never
data.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from common.run_key import RunKey
from pipeline_steps.infra.context import StepContext

_VERSION = re.compile(r"^v\d+$")


class ConfError(ValueError):
    """A DAG run's conf that cannot be used; the first task fails with this message."""


def run_key_from_context(context: Mapping[str, Any], interval_minutes: int = 60) -> str:
    """The interval the DAG run owns (see :meth:`RunKey.from_airflow`) — the key every step
    writes under. A run with no Airflow context (a direct call) owns the interval just ended."""
    if not context:
        return str(RunKey.of(None, minutes=interval_minutes))
    return str(RunKey.from_airflow(context, interval_minutes))


def validate_conf(params: Mapping[str, Any], context: Mapping[str, Any] | None = None,
                  interval_minutes: int = 60) -> dict[str, Any]:
    """Check the run's conf against the project (pack exists and loads, reward version exists);
    Airflow has already checked the types. Returns the conf with its run key."""
    from sandbox.errors import PackError
    conf = {k: params.get(k) for k in ("scenario", "reward_fn", "timesteps", "mode", "dry_run")}
    if "simulate" in params:  # the capture DAG's switch: simulated traffic only when asked for
        conf["simulate"] = params.get("simulate")
    problems = []
    if not isinstance(conf["scenario"], str) or not conf["scenario"]:
        problems.append(f"scenario {conf['scenario']!r}: expected the name of a pack under scenarios/")
    if not isinstance(conf["reward_fn"], str) or not _VERSION.match(conf["reward_fn"]):
        problems.append(f"reward_fn {conf['reward_fn']!r}: expected v<N>, e.g. v1")
    if not isinstance(conf["timesteps"], int) or conf["timesteps"] < 1000:
        problems.append(f"timesteps {conf['timesteps']!r}: expected an integer >= 1000")
    if conf["mode"] not in ("full", "incremental"):
        problems.append(f"mode {conf['mode']!r}: expected 'full' or 'incremental'")
    if not isinstance(conf.get("simulate", False), bool):
        problems.append(f"simulate {conf['simulate']!r}: expected true or false")
    if not isinstance(conf["dry_run"], bool):
        problems.append(f"dry_run {conf['dry_run']!r}: expected true or false")
    if not problems:
        ctx = StepContext.create(conf["scenario"])
        if not (ctx.pack_dir / "scenario.yaml").exists():
            problems.append(f"scenario {conf['scenario']!r}: no pack at {ctx.pack_dir}")
        else:
            try:
                pack = ctx.load_pack(calibration=None)
                pack.reward_fn(conf["reward_fn"])
            except PackError as exc:
                problems.append(f"scenario {conf['scenario']!r} does not load: {exc}")
            except KeyError as exc:
                problems.append(str(exc).strip("'\""))
    if problems:
        raise ConfError("invalid DAG run conf: " + "; ".join(problems))
    conf["run_key"] = run_key_from_context(context or {}, interval_minutes)
    return conf


def _ctx(conf: Mapping[str, Any]) -> StepContext:
    return StepContext.create(conf["scenario"], conf["run_key"], bool(conf.get("dry_run")),
                              overrides={"reward_fn": conf["reward_fn"]})


def capture(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The landing zone of the run key's interval; simulated traffic only when the conf says
    ``simulate: true`` (the result then says ``source: simulation:<profile>``)."""
    from pipeline_steps.capture.step import capture_step
    return capture_step(_ctx(conf), simulate=bool(conf.get("simulate", False)))


def detect_drift(conf: Mapping[str, Any]) -> dict[str, Any]:
    from pipeline_steps.drift.check import drift_check
    return drift_check(_ctx(conf))


def recalibrate(conf: Mapping[str, Any], drift: Mapping[str, Any]) -> dict[str, Any]:
    from pipeline_steps.drift.calibrate import recalibrate as run
    return run(_ctx(conf), traces_uri=drift.get("target_uri"))


def label_queue(conf: Mapping[str, Any]) -> dict[str, Any]:
    from pipeline_steps.labels.step import label_queue_export, label_queue_run
    ctx = _ctx(conf)
    queued = label_queue_run(ctx)
    exported = label_queue_export(ctx)
    return {k: v for k, v in {**queued, "export": exported}.items() if k != "cluster_stats"}


def ingest_labels(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Import every Label Studio annotation file in ``labels/<scenario>/inbox/`` (idempotent)."""
    from pipeline_steps.labels.step import label_queue_import
    ctx = _ctx(conf)
    inbox = ctx.uri("labels", ctx.scenario, "inbox")
    files = ctx.storage.list(inbox, suffix=".json")
    results = [label_queue_import(ctx, uri) for uri in files]
    return {"files": len(files), "labels": sum(r["ingested"] for r in results), "dry_run": ctx.dry_run}


def train_reward_model(conf: Mapping[str, Any]) -> dict[str, Any]:
    from pipeline_steps.training.reward_model import train_reward_model_step
    return train_reward_model_step(_ctx(conf), conf["reward_fn"])


def train_policy(conf: Mapping[str, Any], mode: str) -> dict[str, Any]:
    import socket

    from pipeline_steps.training.policy import train_policy as run
    out = run(_ctx(conf), mode=mode, timesteps=int(conf["timesteps"]), reward_version=conf["reward_fn"])
    # Where training ran: the distributed test checks that it was the gpu queue's worker.
    return {**out, "worker_host": socket.gethostname()}


def stress_test(conf: Mapping[str, Any], trained: Mapping[str, Any]) -> dict[str, Any]:
    from pipeline_steps.stress.step import stress_test as run
    if not trained.get("model_version"):
        return {"skipped": True, "reason": "no candidate was trained", "passed": False}
    out = run(_ctx(conf), reward_fn=conf["reward_fn"], policy_version=str(trained["model_version"]))
    return {k: out[k] for k in ("passed", "verdict", "reasons", "report_uri", "html_uri") if k in out}


def evaluate_and_promote(conf: Mapping[str, Any], trained: Mapping[str, Any],
                         stressed: Mapping[str, Any]) -> dict[str, Any]:
    from pipeline_steps.promotion.evaluate import promote
    if not trained.get("model_version"):
        return {"promoted": False, "reason": "no candidate was trained"}
    out = promote(_ctx(conf), candidate=str(trained["model_version"]))
    return {k: v for k, v in out.items() if k not in ("gates_detail",)}
