"""Learning from logs (``train.source: logs``) on the one-step offer pack: how much of the gap
between the logging policy and the best policy of the world a log-trained candidate closes.

The incumbent is the rule engine serving with ``--exploration`` of its decisions drawn uniformly
from the legal offers (``exploration.distribution: uniform``); ``capture --simulate`` logs
``--logged`` visits of the pack's production world (profile ``live``) into the trace store, and
``rlops train policy --source logs`` learns a candidate from them with the product's settings
(``train.offpolicy``) and registers it. Each policy is then valued in the same world on
``--truth-states`` fresh visits by its *expected* reward: the pack's oracle
(``scenarios/offer_selection/oracle.py``) gives every offer's click probability from the user's
hidden state, so the values carry no click noise and the policies are compared visit by visit.

* logging policy: ``(1 − ε) · Q(s, rule(s)) + ε · mean over legal a of Q(s, a)``;
* log-trained policy: ``Q(s, its greedy choice)`` (what it serves);
* best policy: ``max over legal a of Q(s, a)``. The hidden state the oracle reads is a
  deterministic function of the observed fields (only the click draw is random), so this is the
  best any policy of the observed state can do in this world: an attainable optimum, not a bound.

Share of the gap reached = (trained − logging) / (best − logging); the target is 0.9. The last line
of output is one JSON object; ``--record HOST_CLASS`` appends the run to
``bench/results/learn_from_logs.<HOST_CLASS>.json``.

Usage: python bench/learn_from_logs.py [--logged 150000] [--exploration 0.5] [--record HOST_CLASS]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCENARIO = "offer_selection"
RUN_KEY = "20260105T1100"
TARGET = 0.9


def true_values(pack: Any, policy: Any, exploration: float, states: int, seed: int) -> dict[str, float]:
    """Expected reward per visit of the logging, log-trained and best policies on ``states`` fresh
    visits of the production world (see the module docstring)."""
    import torch

    from rlops.sandbox.env import BatchedEnv
    from rlops.sandbox.policies import load_oracle

    oracle = load_oracle(pack)
    assert oracle is not None, f"pack {pack.name} has no oracle.py"
    env = BatchedEnv(pack.scenario, pack.reward_fn("v1"), num_envs=states, profile="live", illegal_action="noop")
    env.reset(seed)
    q = oracle.action_values(env)  # type: ignore[attr-defined]  # [N, A], -inf where illegal
    mask = env.action_masks()
    q0 = torch.where(mask, q, torch.zeros_like(q))
    rule_choice = env.scenario.rule_actions(env.S, mask)
    rules = q.gather(1, rule_choice.unsqueeze(1)).squeeze(1)
    uniform = q0.sum(1) / mask.sum(1)
    with torch.no_grad():
        chosen = policy.act(env.observe(), deterministic=True).action
    return {
        "rules": float(rules.mean()),
        "uniform": float(uniform.mean()),
        "logging": float(((1 - exploration) * rules + exploration * uniform).mean()),
        "trained": float(q.gather(1, chosen.unsqueeze(1)).mean()),
        "best": float(q.max(1).values.mean()),
        "departs_from_rules": float((chosen != rule_choice).float().mean()),
    }


def record(path: Path, host_class: str, figures: dict[str, Any], command: str) -> None:
    """Append this run to the results file of ``host_class`` (created when it is the first)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    doc: dict[str, Any] = (
        json.loads(path.read_text())
        if path.exists()
        else {"bench": "learn_from_logs", "host_class": host_class, "host": figures["host"], "runs": []}
    )
    v = figures["values"]
    doc["runs"].append(
        {
            "date": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "commit": commit or "unknown",
            "command": command,
            "what": (
                f"offer pack, production world: {figures['logged']:,} visits logged by the rule engine exploring "
                f"{figures['exploration']:.0%} uniformly; candidate learnt from them by `train policy --source logs` "
                f"({figures['estimator']}); expected clicks per visit on {figures['truth_states']:,} fresh visits"
            ),
            "host": figures["host"],
            "load_average": [[figures["loadavg_start"][0], figures["loadavg_end"][0]]],
            "rlops": (
                f"log-trained {v['trained']:.5f} per visit against logging {v['logging']:.5f} and best "
                f"{v['best']:.5f}: {figures['gap_share']:.2f} of the gap; it serves another offer than the "
                f"rule engine on {v['departs_from_rules']:.1%} of visits"
            ),
            "peer": f"the incumbent without exploration (rule engine) {v['rules']:.5f}",
            "ratio": "—",
            "bar": f"≥ {TARGET} of the logging-to-best gap",
            "bar_met": figures["gap_share"] >= TARGET,
            "figures": {k: figures[k] for k in ("values", "gap_share", "train_seconds", "capture_seconds", "wall_s")},
        }
    )
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    print(f"recorded in {path.relative_to(REPO)}")


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--logged", type=int, default=150_000, help="visits logged by the exploring incumbent")
    p.add_argument("--exploration", type=float, default=0.5, help="its uniform exploration share")
    p.add_argument("--truth-states", type=int, default=100_000, help="fresh visits each policy is valued on")
    p.add_argument("--record", metavar="HOST_CLASS", help="append the run to bench/results/")
    p.add_argument("--host", default="", help="a line about the host, recorded with --record")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    import torch

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="rlops-bench-logs-"))
    os.environ.update(
        {
            "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}",
            "RLOPS_ARTIFACT_ROOT": str(work / "artifacts"),
            "RLOPS_STORAGE_ROOT": f"file://{work / 'storage'}",
        }
    )
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.policy_loader import load_policy_ref
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    overrides = {
        "local_dir": str(work / "local"),
        "exploration": {"share": args.exploration, "distribution": "uniform"},
        "train": {"eval_episodes": 2000},
    }
    ctx = StepContext.create(SCENARIO, run_key=RUN_KEY, overrides=overrides)
    t = time.monotonic()
    cap = capture_step(ctx, CaptureRequest(simulate=True, episodes=args.logged))
    capture_s = time.monotonic() - t
    print(f"captured {cap.rows_accepted:,} logged visits in {capture_s:.0f} s", flush=True)
    out = train_policy(ctx, TrainRequest(source="logs"))
    assert out.trained is not None and out.model_version is not None
    loaded = load_policy_ref(ctx, out.model_version, work / "policy")
    assert loaded is not None
    values = true_values(ctx.load_pack(), loaded.network, args.exploration, args.truth_states, seed=9_000_000)
    share = (values["trained"] - values["logging"]) / (values["best"] - values["logging"])
    print(
        f"expected clicks per visit — logging {values['logging']:.5f}, log-trained {values['trained']:.5f}, "
        f"best {values['best']:.5f} (rules without exploration {values['rules']:.5f}): {share:.2f} of the gap; "
        f"another offer than the rules' on {values['departs_from_rules']:.1%} of visits "
        f"(target {TARGET}); trained in {out.trained.train_seconds:.0f} s, version {out.model_version}",
        flush=True,
    )
    load_end = report_load("end")
    figures = {
        "pack": SCENARIO,
        "logged": args.logged,
        "exploration": args.exploration,
        "truth_states": args.truth_states,
        "estimator": ctx.config.train.offpolicy.estimator,
        "values": {k: round(v, 6) for k, v in values.items()},
        "gap_share": round(share, 3),
        "target_met": share >= TARGET,
        "train_seconds": out.trained.train_seconds,
        "capture_seconds": round(capture_s, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "host": args.host,
    }
    if args.record:
        command = "bench/learn_from_logs.py" + "".join(
            f" --{k} {v}"
            for k, v in (("logged", args.logged), ("exploration", args.exploration))
            if v != p.get_default(k)
        )
        record(REPO / "bench" / "results" / f"learn_from_logs.{args.record}.json", args.record, figures, command)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
