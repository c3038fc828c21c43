"""What ``bench/stack_soak.py`` watches and does to the stack: bring it up, follow the registry and the
stack's CPU, kill the scheduler's whole session mid-training and restart it, then read the outcome
from Airflow's REST API, MLflow and the agent's account."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlops.common.airflow_api import AirflowApi, read_credentials
from rlops.pipeline_steps.orchestration.settings import DAG_KINDS
from rlops.stack import processes


class Watcher:
    def __init__(
        self, workdir: Path, env: dict[str, str], packs: list[str], minutes: float, say: Callable[[str], None]
    ):
        self.workdir, self.env, self.packs, self.minutes, self.say = workdir, env, packs, minutes, say
        self.load_start = list(os.getloadavg())
        self.t0 = 0.0
        self.up_doc: dict[str, Any] = {}
        self.kill_at: float | None = None
        self.champions: dict[str, list[tuple[float, str | None]]] = {p: [] for p in packs}
        self.moves: list[tuple[str, str, float]] = []  # (pack, version, moved at)
        self.cpu: dict[tuple[int, int], float] = {}

    # ------------------------------------------------------------------ the stack
    def rlops(self, *args: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-m", "rlops.cli", *args, "--json"], env=self.env, cwd=self.workdir,
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if out.returncode not in (0, 1) or not out.stdout.strip():
            raise RuntimeError(f"rlops {' '.join(args)} exited {out.returncode}: {out.stderr[-3000:]}")
        return dict(json.loads(out.stdout))

    def up(self) -> None:
        started = time.monotonic()
        self.up_doc = self.rlops("stack", "up")
        self.say(f"stack up in {time.monotonic() - started:.0f} s; problems: {self.up_doc['problems']}")
        self.t0 = time.time()
        user, password = read_credentials(self.up_doc["credentials_file"])
        self.api = AirflowApi(self.up_doc["airflow_url"], user, password, timeout_s=30)

    def stack_env(self) -> dict[str, str]:
        return {"MLFLOW_TRACKING_URI": self.up_doc["mlflow_url"]}

    def down(self) -> None:
        self.rlops("stack", "down")

    def _sessions(self) -> list[int]:
        state = json.loads((Path(self.up_doc["home"]) / "state.json").read_text())
        return [int(p["pid"]) for p in state["parts"].values()]

    # ------------------------------------------------------------------ watching
    def run(self, agent: subprocess.Popen[bytes], status: Path) -> None:
        end = self.t0 + self.minutes * 60
        kill_from, next_say = self.t0 + 0.7 * self.minutes * 60, 0.0
        while time.time() < end:
            now = time.time()
            self._sample_registry(now)
            self._sample_cpu()
            if agent.poll() is not None:
                raise RuntimeError(f"the agent exited ({agent.returncode}); see {self.workdir / 'agent.log'}")
            if self.kill_at is None and now >= kill_from and (self._training_now() or now >= kill_from + 600):
                self._kill_and_restart()
            if now >= next_say:
                rows = json.loads(status.read_text()).get("rows_written", 0) if status.exists() else 0
                champs = {p: (c[-1][1] if c else None) for p, c in self.champions.items()}
                self.say(f"minute {(now - self.t0) / 60:5.1f}: champions {champs}; agent rows {rows}")
                next_say = now + 60
            time.sleep(5)

    def _sample_registry(self, now: float) -> None:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=self.up_doc["mlflow_url"])
        for pack in self.packs:
            try:
                champion = client.get_registered_model(f"{pack}-policy").aliases.get("champion")
            except Exception:  # noqa: BLE001 - no model yet, or the server is busy: a sample without a champion
                champion = None
            history = self.champions[pack]
            if champion is not None and (not history or history[-1][1] != str(champion)):
                self.moves.append((pack, str(champion), now))
            history.append((now, str(champion) if champion is not None else None))

    def _sample_cpu(self) -> None:
        """CPU seconds of every process in the stack's sessions, sampled (the max per process)."""
        for pid in processes.session_members(self._sessions()):
            st = processes.proc_stat(pid)
            if st is not None:
                key = (pid, st.start_ticks)
                self.cpu[key] = max(self.cpu.get(key, 0.0), st.cpu_s)

    def _training_now(self) -> bool:
        out = self.api.request("GET", "/api/v2/dags/~/dagRuns/~/taskInstances?task_id=train_policy&state=running")
        return bool(out.get("task_instances"))

    def _kill_and_restart(self) -> None:
        """SIGKILL the scheduler's whole session (the scheduler, its LocalExecutor workers, their task
        supervisors and the training itself), then ``rlops stack up`` starts a new scheduler."""
        state = json.loads((Path(self.up_doc["home"]) / "state.json").read_text())
        scheduler = int(state["parts"]["airflow-scheduler"]["pid"])
        victims = processes.session_members([scheduler])
        self._sample_cpu()
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.kill_at = time.time()
        self.say(
            f"minute {(self.kill_at - self.t0) / 60:.1f}: SIGKILL to the scheduler's session ({len(victims)} processes)"
        )
        time.sleep(5)
        again = self.rlops("stack", "up")
        self.say(f"restarted {again['started']} in {again['seconds']} s")

    def drain(self, stopped_at: float, timeout_s: float) -> bool:
        """Until every pack's capture has run for an interval that ends after the agent stopped and
        no capture of an earlier interval is still queued or running (all the agent wrote is then in
        the trace store: a busy scheduler runs captures late, not never), at most ``timeout_s``;
        whether it got there."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            done = []
            for p in self.packs:
                runs = self.runs(f"trace_capture__{p}")
                after = any(r["state"] == "success" and (_ts(r.get("run_after")) or 0.0) >= stopped_at for r in runs)
                done.append(after and not any(r["state"] in ("queued", "running") for r in runs))
            if all(done):
                return True
            self._sample_cpu()
            time.sleep(10)
        return False

    # ------------------------------------------------------------------ the outcome
    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.api.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=1000").get("dag_runs", []))

    def _ti(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        from urllib.parse import quote

        return dict(
            self.api.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}")
        )

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        from urllib.parse import quote

        path = (
            f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/xcomEntries/return_value"
        )
        value = self.api.request("GET", path + "?deserialize=true")["value"]
        return json.loads(value) if isinstance(value, str) else value

    def result(self, account: dict[str, Any], changes: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        from mlflow import MlflowClient

        wall = time.time() - self.t0
        runs = {f"{k}__{p}": self.runs(f"{k}__{p}") for k in DAG_KINDS for p in self.packs}
        states = Counter(r["state"] for rs in runs.values() for r in rs)
        lost = 0
        for p in self.packs:
            emergency_ids = {r["dag_run_id"] for r in runs[f"retrain_full__{p}"]}
            for r in runs[f"drift_monitor__{p}"]:
                trig = self._ti(f"drift_monitor__{p}", r["dag_run_id"], "trigger_emergency_retrain").get("state")
                if trig == "failed" or (trig == "success" and f"emergency__{r['dag_run_id']}" not in emergency_ids):
                    lost += 1

        def by_kill(r: dict[str, Any]) -> bool:
            if self.kill_at is None:
                return False
            start = _ts(r.get("start_date")) or 0.0
            end = _ts(r.get("end_date")) or float("inf")
            return start <= self.kill_at <= end

        failed = [f"{r['dag_id']} {r['dag_run_id']}" for rs in runs.values() for r in rs if r["state"] == "failed"]
        failed_not_by_kill = [
            f"{r['dag_id']} {r['dag_run_id']}"
            for rs in runs.values()
            for r in rs
            if r["state"] == "failed" and not by_kill(r)
        ]
        captured = Counter()
        for p in self.packs:
            for r in runs[f"trace_capture__{p}"]:
                if r["state"] == "success":
                    out = self.xcom(f"trace_capture__{p}", r["dag_run_id"], "capture") or {}
                    for k in ("rows_in", "rows_accepted", "rows_quarantined"):
                        captured[k] += int(out.get(k, 0) or 0)
        without = 0.0
        for history in self.champions.values():
            first = next((i for i, (_, v) in enumerate(history) if v), None)
            if first is not None:
                without += sum(b[0] - a[0] for a, b in zip(history[first:], history[first + 1 :]) if a[1] is None)
        served = account.get("served", {})
        latencies, unserved = [], 0
        for pack, version, moved in self.moves:
            first = next((t for k, t in served.items() if k == f"{pack}|champion|{pack}-policy/{version}"), None)
            if first is None:
                unserved += 1
            else:
                latencies.append(max(0.0, float(first) - moved + 5.0))  # the move happened up to 5 s before it was seen
        client = MlflowClient(tracking_uri=self.up_doc["mlflow_url"])
        answered = 0
        outcomes = []
        for pack in self.packs:
            for change in changes[pack]:
                at = self.t0 + change["at"] * self.minutes * 60
                served_after = False
                for k, first in served.items():
                    if not k.startswith(f"{pack}|champion|") or float(first) < at:
                        continue
                    mv = client.get_model_version(f"{pack}-policy", k.rsplit("/", 1)[-1].lstrip("v"))
                    if mv.run_id and client.get_run(mv.run_id).info.start_time / 1000 > at:
                        answered += 1
                        served_after = True
                        break
                outcomes.append(change_outcome(client, pack, change, at, self.t0, served_after))
        return {
            "scheduler_minutes": round(wall / 60, 1),
            "packs": self.packs,
            "dag_runs": dict(states),
            "failed_runs": failed,
            "lost_triggers": lost,
            "failed_not_by_kill": len(failed_not_by_kill),
            "failed_not_by_kill_runs": failed_not_by_kill,
            "killed_at_minute": round((self.kill_at - self.t0) / 60, 1) if self.kill_at else None,
            "seconds_without_champion": round(without, 1),
            "promotions": len(self.moves),
            "promotion_to_agent_s": round(max(latencies), 1) if latencies else None,
            "promotions_not_served": unserved,
            "rows_written": int(account.get("rows_written", 0)),
            "rows_in": captured["rows_in"],
            "rows_not_captured": int(account.get("rows_written", 0)) - captured["rows_in"],
            "rows_accepted": captured["rows_accepted"],
            "rows_quarantined": captured["rows_quarantined"],
            "world_changes": sum(len(changes[p]) for p in self.packs),
            "world_changes_answered": answered,
            "world_changes_judged": sum(bool(o["judged"]) for o in outcomes),
            "world_change_outcomes": outcomes,
            "cpu_s_per_pack_hour": round(sum(self.cpu.values()) / (len(self.packs) * wall / 3600), 1),
            "wall_s": round(wall, 1),
        }


def change_outcome(
    client: Any, pack: str, change: dict[str, Any], at: float, t0: float, served_after: bool
) -> dict[str, Any]:
    """What the loop did about one world change: the candidates trained after it and the gates'
    verdict on each (``eval_passed``, the candidate's and the champion's mean return in the
    sandbox as recalibrated). A change is *judged* when at least one such candidate got a verdict:
    an input drift the champion already handles is answered by keeping it, which the gates say."""
    judged = []
    for mv in client.search_model_versions(f"name='{pack}-policy'"):
        if not mv.run_id or client.get_run(mv.run_id).info.start_time / 1000 <= at:
            continue
        verdict = mv.tags.get("eval_passed")
        if verdict is None:
            continue
        row: dict[str, Any] = {"version": mv.version, "eval_passed": verdict == "true"}
        eval_run = mv.tags.get("eval_run_id")
        if eval_run:
            m = client.get_run(eval_run).data.metrics
            row |= {k: round(m[k], 4) for k in ("candidate_mean_return", "champion_mean_return") if k in m}
        judged.append(row)
    return {
        "pack": pack,
        "kind": change["kind"],
        "at_minute": round((at - t0) / 60, 1),
        "champion_trained_after_serves": served_after,
        "judged": sorted(judged, key=lambda r: int(r["version"])),
    }


def _ts(text: str | None) -> float | None:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None
