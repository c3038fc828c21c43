"""The best achievable team policy for the loan desk, for scoring learners.

Neither agent is shown the applicant's default risk; the oracle computes it (the desk's risk
model in ``reward_v1.py``) and books every approval at its expected margin. What it does not know
is what no policy can know in advance: whether a request for documents will be answered (60% of
the time, scenario.yaml) or whether a call will fail (the profile's error rates). At every step it
solves the application's remaining decision problem exactly by backward induction over (stage,
documents complete, requests made, steps left) and takes the acting role's legal action with the
highest expected return, so its mean return is the attainable optimum for the team reward (the
team components plus each acting role's own, weighted and clipped per step as the runtime does).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

import torch

from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.pack import Pack

Tensor = torch.Tensor
INTAKE, UNDERWRITING = "intake", "underwriting"
SCREENER_ACTIONS = ("request_documents", "pass_to_underwriting", "reject_application")
UNDERWRITER_ACTIONS = ("approve", "approve_reduced", "decline")
REDUCED_INCOMES = 2.0   # approve_reduced approves twice the monthly income (scenario.yaml)


def _reward_module(pack: Pack) -> Any:
    spec = importlib.util.spec_from_file_location(f"rlops_reward_{pack.name}_oracle", Path(pack.path) / "reward_v1.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _answer_rate(pack: Pack) -> float:
    """The probability that a request for documents completes the file (its effect's ``prob``)."""
    action = next(a for a in pack.scenario.spec.actions if a.name == "request_documents")
    return float(next(e.prob for e in action.effects if "applicant.documents_complete" in e.set))


def make_oracle(pack: Pack) -> Callable[[BatchedEnv], Tensor]:
    scenario = pack.scenario
    names, cols = scenario.action_names, scenario.columns
    idx = {n: names.index(n) for n in (*SCREENER_ACTIONS, *UNDERWRITER_ACTIONS)}
    stages = scenario.types["application.stage"].values
    rw = _reward_module(pack)
    answered = _answer_rate(pack)
    # The business objective is reward v1's, whatever reward the environment scores with (a
    # candidate reward under test is judged against the desk's v1 optimum).
    w = {k: float(rw.WEIGHTS.get(k, 1.0)) for k in ("margin", "operations", "compliance")}
    clip_at = getattr(rw, "CLIP", None)
    max_requests = int(scenario.spec.field("application.document_requests").max or 0)
    c = {k: cols[k] for k in ("applicant.credit_score", "applicant.income_monthly", "applicant.requested_amount",
                              "applicant.documents_complete", "application.stage",
                              "application.document_requests", "episode.step")}

    def act(env: BatchedEnv) -> Tensor:
        S, masks = env.S, env.action_masks()
        err = scenario.profiles[env.profile]["error_rate"].to(S.device)
        score, income = S[:, c["applicant.credit_score"]], S[:, c["applicant.income_monthly"]]
        requested = S[:, c["applicant.requested_amount"]]
        neg_inf = torch.full_like(score, -float("inf"))

        def clip(x: Tensor) -> Tensor:
            return x if clip_at is None else x.clamp(-clip_at, clip_at)

        def approval(amount: Tensor, take_up: float) -> Tensor:
            """The step reward of an approval that goes through: margin net of the expected loss,
            the affordability cap and the step cost."""
            p = rw.default_probability(score, amount, income)
            margin = take_up * amount / rw.AMOUNT_UNIT_CNY * (rw.MARGIN * (1 - p) - rw.LOSS_GIVEN_DEFAULT * p)
            over = (amount > rw.CAP_INCOMES * income) & (score < rw.CAP_SCORE)
            cap = torch.where(over, -rw.CAP_COST, 0.0)
            return clip(w["margin"] * margin + w["compliance"] * cap - w["operations"] * rw.STEP_COST)

        step_only = clip(torch.full_like(score, -w["operations"] * rw.STEP_COST))
        r_approve = approval(requested, 1.0)
        reducible = requested > REDUCED_INCOMES * income
        r_reduced = torch.where(reducible, approval(REDUCED_INCOMES * income, rw.REDUCED_TAKE_UP), neg_inf)
        memo: dict[tuple[str, bool, int, int], Tensor] = {}

        def value(stage: str, docs: bool, n: int, k: int) -> Tensor:
            """Expected return from here acting optimally, ``k`` steps before the horizon."""
            if k <= 0:
                return torch.zeros_like(score)
            key = (stage, docs, n, k)
            if key not in memo:
                memo[key] = torch.stack(list(q_values(stage, docs, n, k).values())).max(0).values
            return memo[key]

        def attempt(a: str, ok_reward: Tensor, ok_value: Tensor, failed_reward: Tensor,
                    stay: tuple[str, bool, int, int]) -> Tensor:
            """An action that goes through with the profile's success rate; a failed call
            changes nothing but costs its step."""
            e = float(err[idx[a]])
            q = (1 - e) * (ok_reward + ok_value)
            return q + e * (failed_reward + value(*stay)) if e > 0 else q

        def q_values(stage: str, docs: bool, n: int, k: int) -> dict[str, Tensor]:
            stay, zero = (stage, docs, n, k - 1), torch.zeros_like(score)
            if stage == UNDERWRITING:
                q = {"decline": attempt("decline", step_only, zero, step_only, stay)}
                if docs:
                    q["approve"] = attempt("approve", r_approve, zero, step_only, stay)
                    q["approve_reduced"] = attempt("approve_reduced", r_reduced, zero, step_only, stay)
                return q
            passed = clip(step_only - (0.0 if docs else w["compliance"] * rw.INCOMPLETE_FILE_COST))
            q = {"reject_application": attempt("reject_application", step_only, zero, step_only, stay),
                 "pass_to_underwriting": attempt("pass_to_underwriting", passed,
                                                 value(UNDERWRITING, docs, n, k - 1), step_only, stay)}
            if not docs and n < max_requests:
                asked = clip(step_only - w["operations"] * rw.REQUEST_COST)   # charged even if the mail fails
                after = (answered * value(INTAKE, True, n + 1, k - 1)
                         + (1 - answered) * value(INTAKE, False, n + 1, k - 1))
                q["request_documents"] = attempt("request_documents", asked, after, asked, stay)
            return q

        stage_now = S[:, c["application.stage"]].long()
        docs_now = S[:, c["applicant.documents_complete"]] > 0.5
        n_now = S[:, c["application.document_requests"]].long()
        k_now = env.horizon - S[:, c["episode.step"]].long()
        choice = scenario.rule_actions(S, masks)   # closed rows: whatever is legal
        best = neg_inf.clone()
        for stage in (INTAKE, UNDERWRITING):
            for docs in (False, True):
                for n in range(max_requests + 1):
                    for k in range(1, env.horizon + 1):
                        rows = (stage_now == stages.index(stage)) & (docs_now == docs) & (n_now == n) & (k_now == k)
                        if not bool(rows.any()):
                            continue
                        for name, q in q_values(stage, docs, n, k).items():
                            better = rows & masks[:, idx[name]] & (q > best)
                            best = torch.where(better, q, best)
                            choice = torch.where(better, torch.full_like(choice, idx[name]), choice)
        return choice
    return act
