"""Any target estimated off-policy on logged live traffic: ``rlops model evaluate --target``.

A *target* is what would choose the actions in place of what served them:

* ``rules`` — the pack's rule engine as it would serve: its choice, plus the ``exploration.share``
  of decisions drawn uniformly over the legal actions (none in ``exploration.off_segment``);
* ``uniform`` — uniform over the legal actions;
* a registered version or alias (``3``, ``champion``, ``credit_approval-policy/3``) as it will serve
  (:func:`~rlops.pipeline_steps.promotion.ope_value.serving_target`, after ``ope.target``);
* a file of per-row action probabilities (:mod:`rlops.pipeline_steps.promotion.ope_target_file`).

:func:`evaluate_target` reads the window of live traces the off-policy gate reads (``ope.window_hours``
up to the run key's end), turns the target into its probabilities on the rows of the window's
complete live episodes and returns every estimator of
:func:`~rlops.pipeline_steps.promotion.ope_value.off_policy_value` with its interval, the weights'
diagnostics and, when the evidence cannot decide, why. It is a report, not a gate: nothing is
written, nothing is promoted, and an insufficient estimate is still an answer.

DR's direct method is ``ope.direct_method`` as for the gate. The sandbox's is fitted on episodes
the target plays there; a file's probabilities exist on the logged rows only, so a file target has
no direct method in the sandbox (DR then equals PDIS; the reward model's works on any target).
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.agent_sdk.serving import exploration_probs
from rlops.common import step_request
from rlops.common.errors import UserError
from rlops.common.policy_ref import PolicyRef, policy_model_name
from rlops.common.step_result import StepResult
from rlops.pipeline_steps.infra.policy_loader import load_policy_ref
from rlops.pipeline_steps.promotion.evaluate import evaluation_profile
from rlops.pipeline_steps.promotion.ope_direct import (
    LinearQ,
    TargetProbs,
    fit_linear_q,
    returns_to_go,
)
from rlops.pipeline_steps.promotion.ope_gate import reward_model_rows, sandbox_direct
from rlops.pipeline_steps.promotion.ope_sufficiency import traffic_problem
from rlops.pipeline_steps.promotion.ope_target_file import (
    SUFFIXES,
    is_file_spec,
    probabilities_for_rows,
    read_probabilities,
)
from rlops.pipeline_steps.promotion.ope_value import (
    OPEResult,
    complete_live_episodes,
    network_target,
    off_policy_value,
    serving_target,
)
from rlops.pipeline_steps.promotion.request import OffPolicyRequest
from rlops.sandbox.reward_choice import choose_reward
from rlops.sandbox.segments import compile_segment
from rlops.sandbox.traces import rollout_traces
from rlops.trace_store.states import action_codes, mask_matrix, state_features, states_from_traces

if TYPE_CHECKING:
    import pandas as pd

    from rlops.common.params_operations import ExplorationParams, OpeParams
    from rlops.common.params_promotion import EvaluateParams
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack

KEYWORDS = ("rules", "uniform")
EXPECTED = (
    "expected rules, uniform, a registered version or alias (3, champion, <scenario>-policy/3) or a file of "
    f"per-row action probabilities ({', '.join(SUFFIXES)})"
)
NO_SANDBOX_DM = (
    "a file's probabilities exist on the logged rows only, so the sandbox's direct method, fitted on episodes "
    "the target plays there, cannot be: DR without a direct method (it equals PDIS)"
)


@dataclass(frozen=True)
class Target:
    """A target resolved against the window: its probabilities on the logged rows (``probs``,
    ``(obs, mask) → P[N, A]``) and whether it can play episodes in the sandbox."""

    kind: str
    """``rules``, ``uniform``, ``version`` or ``file``."""
    name: str
    """``rules``, ``uniform``, ``<scenario>-policy/<version>`` or the file's path."""
    serves: str
    """How it chooses, in words."""
    probs: TargetProbs
    in_sandbox: bool
    """Whether ``probs`` also answers on states the sandbox draws (a rule target plays by its own rule)."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TargetEvaluation(StepResult):
    """What the logged traffic of a window says about one target: every estimator with its
    interval, the effective sample size, the weights, the unsupported share and the logged value."""

    scenario: str
    run_key: str
    target: str
    """As given (``--target``)."""
    kind: str
    policy: str
    serves: str
    window_start: str
    window_end: str
    rows: int
    """Logged rows of the window's complete live episodes (what the estimate is made of)."""
    direct_method: str
    """DR's direct method as used: ``sandbox``, ``reward_model`` or ``none``."""
    confidence: float
    result: OPEResult
    notes: list[str]

    def as_dict(self) -> dict[str, Any]:
        """The report's fields, the result's beside them (``estimates``, ``ess``, ``insufficient`` …)."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "result"}
        return {**own, **self.result.as_dict()}


def target_kind(spec: str) -> str:
    """``rules``, ``uniform``, ``version`` or ``file``: what a ``--target`` names. A name with a
    table's suffix is a file; a policy reference is a version, even where a file of that name
    exists; anything else that exists is a file (and is refused there if it is no table)."""
    if not spec.strip():
        raise UserError(f"--target '': empty; {EXPECTED}")
    if spec in KEYWORDS:
        return spec
    if Path(spec).suffix.lower() in SUFFIXES:
        return "file"
    try:
        PolicyRef.parse(spec)
    except UserError:
        if is_file_spec(spec):
            return "file"
        raise UserError(f"--target {spec[:200]!r}: {EXPECTED}") from None
    return "version"


def evaluate_target(ctx: StepContext, request: OffPolicyRequest) -> TargetEvaluation:
    """The off-policy estimate of ``request.target`` on the window's logged live traffic (see the
    module docstring). Bad input — an unknown version, a file that does not match the rows, a
    setting out of bounds — is a :class:`UserError` before any estimate."""
    problems = [p for o in step_request.options(OffPolicyRequest) if (p := o.problem(getattr(request, o.name), o.flag))]
    if problems:
        raise UserError("; ".join(problems))
    cfg, explore = ctx.config.ope, ctx.config.exploration
    hours = cfg.window_hours if request.window_hours is None else request.window_hours
    spec = request.target
    kind = target_kind(spec)
    if request.greedy and kind in ("file", "uniform"):
        what = "a file's probabilities are what the file says" if kind == "file" else "uniform has no choice of its own"
        raise UserError(f"--greedy goes with --target rules or a policy version: {what} (--target {spec[:200]})")
    pack = ctx.load_pack()
    actions = list(pack.scenario.action_names)
    table = read_probabilities(Path(spec), actions) if kind == "file" else None
    # a version that is no policy is refused before the traces are read
    policy = _policy_target(ctx, spec, request.greedy, cfg, explore) if kind == "version" else None
    start, end = ctx.key.lookback(hours)
    frame = ctx.traces.read(ctx.scenario, (start, end)).reset_index(drop=True)
    rows = complete_live_episodes(frame)
    if policy is not None:
        target = policy
    elif kind == "file":
        assert table is not None  # read above
        probs, extra = probabilities_for_rows(Path(spec), table, rows, actions, _masks(pack, rows))
        left = (f"{extra:,} rows of the file are no logged row of the window's complete live episodes: left aside",)
        target = Target("file", spec, "the file's per-row probabilities", _on_rows(probs), False, left if extra else ())
    elif kind == "rules":
        target = _rules_target(pack, rows, request.greedy, explore)
    else:
        target = Target("uniform", "uniform", "uniform over the legal actions", _uniform, True)
    method = request.direct_method or cfg.direct_method
    dm_settings = DirectMethodSettings(cfg, ctx.config.evaluate, ctx.params.get("reward_fn"))
    q, used, note = _direct_method(ctx, dm_settings, pack, target, frame, rows, method)
    res = off_policy_value(pack, frame, target.probs, cfg, q)
    return TargetEvaluation(
        scenario=ctx.scenario,
        run_key=ctx.run_key,
        target=spec,
        kind=target.kind,
        policy=target.name,
        serves=target.serves,
        window_start=_iso(start),
        window_end=_iso(end),
        rows=len(rows),
        direct_method=used,
        confidence=cfg.confidence,
        result=res,
        notes=[*target.notes, *([note] if note else [])],
    )


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- the targets
def _uniform(obs: Any, mask: Any) -> np.ndarray:
    legal = mask.numpy().astype(np.float64)
    out: np.ndarray = legal / np.maximum(legal.sum(axis=1, keepdims=True), 1.0)
    return out


def _on_rows(p: np.ndarray) -> TargetProbs:
    """Probabilities fixed on the window's rows, as :func:`off_policy_value` asks for them (the rows
    of :func:`complete_live_episodes`, in its order)."""

    def probs(obs: Any, mask: Any) -> np.ndarray:
        if len(mask) != len(p):
            raise ValueError(f"probabilities of {len(p)} logged rows asked for {len(mask)} rows")
        return p

    return probs


def _masks(pack: Pack, rows: pd.DataFrame) -> np.ndarray:

    if rows.empty:
        return np.zeros((0, pack.scenario.n_actions), dtype=bool)
    return mask_matrix(rows["action_mask"], pack.scenario.n_actions)


def _rules_target(pack: Pack, rows: pd.DataFrame, greedy: bool, explore: ExplorationParams) -> Target:
    """The rule engine as it would serve the logged rows: its choice (it reads the state, rebuilt
    from each row), and unless ``greedy`` the exploration share drawn uniformly over the legal
    actions — none where ``exploration.off_segment`` holds, as a policy client serves it."""
    import torch

    share = 0.0 if greedy else explore.share
    serves = "its choice alone (--greedy)" if greedy else f"its choice + {share:.0%} uniform exploration"
    if explore.off_segment and not greedy:
        serves += f" (none where {explore.off_segment})"
    legal = _masks(pack, rows)
    probs = np.zeros(legal.shape, dtype=np.float64)
    if len(rows):
        S = states_from_traces(pack, rows)
        choice = pack.scenario.rule_actions(S, torch.from_numpy(legal)).cpu().numpy().astype(np.int64)
        eps = np.full(len(rows), share)
        if explore.off_segment and share > 0:
            off = compile_segment(pack.scenario.spec, explore.off_segment)
            eps[off(S).cpu().numpy().astype(bool)] = 0.0
        probs[np.arange(len(rows)), choice] = 1.0
        probs = (1.0 - eps)[:, None] * probs + eps[:, None] * exploration_probs(legal)
    return Target("rules", "rules", f"the rule engine: {serves}", _on_rows(probs), False)


def _policy_target(
    services: StepServices, spec: str, greedy: bool, cfg: OpeParams, explore: ExplorationParams
) -> Target:
    """A registered version or alias as it will serve (``ope.target`` and ``exploration:``), or
    greedily; an unknown version, an alias that is not set or a policy of another layout is a
    :class:`UserError`."""

    try:
        ref = PolicyRef.parse(spec, services.scenario)
        with tempfile.TemporaryDirectory(prefix="rlops-target-") as tmp:
            loaded = load_policy_ref(services, ref, Path(tmp))
    except UserError as exc:
        raise UserError(f"--target {spec}: {exc}") from None
    if loaded is None:
        raise UserError(f"--target {spec}: the alias {ref.alias} is not set for {policy_model_name(services.scenario)}")
    net = loaded.network
    if greedy:
        inner, serves = network_target(net, True, 0.0), "its greedy choice alone (--greedy)"
    else:
        inner, serves = serving_target(net, cfg, explore), _serving_words(cfg, explore)
    name = f"{policy_model_name(services.scenario)}/{loaded.version}"

    def probs(obs: Any, mask: Any) -> np.ndarray:
        if obs.shape[1] != net.config.obs_dim:
            raise UserError(
                f"--target {spec}: {name} reads {net.config.obs_dim} observation values, the pack's rows give "
                f"{obs.shape[1]}: it was trained on another layout of the pack"
            )
        return inner(obs, mask)

    return Target("version", name, serves, probs, True)


def _serving_words(cfg: OpeParams, explore: ExplorationParams) -> str:
    if cfg.target == "stochastic":
        return "its softmax (ope.target stochastic)"
    if cfg.target == "greedy" or explore.share == 0:
        return f"its greedy choice (ope.target {cfg.target})"
    return f"its greedy choice + {explore.share:.0%} {explore.distribution} exploration, as it will serve"


# --------------------------------------------------------------------------- DR's direct method
@dataclass(frozen=True)
class DirectMethodSettings:
    """The settings DR's direct method is fitted with, as the off-policy gate fits it."""

    ope: OpeParams
    """The params' ``ope:`` block (the direct method, its episodes, exploration, ridge and seed)."""
    evaluate: EvaluateParams
    """The params' ``evaluate:`` block: the profile and the reward function the sandbox plays with."""
    configured_reward_fn: str | None
    """The project params' ``reward_fn``: one input of the reward function's choice
    (:mod:`rlops.sandbox.reward_choice`), made when ``evaluate.reward_fn`` names none."""


def _direct_method(
    services: StepServices,
    settings: DirectMethodSettings,
    pack: Pack,
    target: Target,
    frame: pd.DataFrame,
    rows: pd.DataFrame,
    method: str,
) -> tuple[LinearQ | np.ndarray | None, str, str | None]:
    """``(Q̂, the method used, a note when it is not the one asked for)``; nothing is fitted when
    the traffic cannot judge anyway."""
    cfg = settings.ope
    if method == "none" or traffic_problem(rows, cfg) is not None:
        return None, method, None
    if method == "reward_model":
        return _reward_model_q(services, pack, frame)
    if target.kind == "file":
        return None, "none", NO_SANDBOX_DM

    profile = evaluation_profile(pack, settings.evaluate.profile)
    label = str(settings.evaluate.reward_fn or choose_reward(pack, None, settings.configured_reward_fn).reward_fn)
    if target.in_sandbox:
        q = sandbox_direct(pack, target.probs, cfg, profile, label)
        return q, "sandbox", None
    return _rules_q(pack, cfg, profile, label), "sandbox", None


def _reward_model_q(ctx: StepServices, pack: Pack, frame: pd.DataFrame) -> tuple[np.ndarray | None, str, str | None]:
    """The newest reward model's ``Q̂[N, A]`` on the frame's rows (none registered: no direct method)."""
    q = reward_model_rows(ctx, pack, frame)
    if q is None:
        return None, "none", "no reward model is registered: DR without a direct method (it equals PDIS)"
    return q, "reward_model", None


def _rules_q(pack: Pack, cfg: OpeParams, profile: str, label: str) -> LinearQ:
    """The sandbox direct method for the rule engine, fitted as
    :func:`~rlops.pipeline_steps.promotion.ope_direct.sandbox_q` fits it, on episodes the rule
    engine plays with ``ope.dm_explore`` of its decisions random legal ones: the rules read the
    state, which a target's ``(obs, mask)`` does not carry."""
    import torch

    gen = torch.Generator().manual_seed(cfg.seed)

    def act(env: Any) -> Any:
        mask = env.action_masks()
        own = env.scenario.rule_actions(env.S, mask)
        noise = torch.rand(mask.shape, generator=gen).to(mask.device)
        rand = torch.where(mask, noise + 1.0, torch.zeros_like(noise)).argmax(dim=1)
        pick = (torch.rand(mask.shape[0], generator=gen) < cfg.dm_explore).to(mask.device)
        return torch.where(pick, rand, own)

    rows = rollout_traces(
        pack,
        act,
        cfg.dm_episodes,
        seed=cfg.seed,
        profile=profile,
        reward_fn=label,
        source="sandbox",
        episode_prefix=f"ope-dm-{cfg.seed}",
    )
    feats = state_features(pack, rows).numpy()
    return fit_linear_q(
        feats, action_codes(pack, rows["action"]), returns_to_go(rows), pack.scenario.n_actions, cfg.ridge
    )


__all__ = ["Target", "TargetEvaluation", "evaluate_target", "target_kind"]
