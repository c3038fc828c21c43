"""Loading a policy network, in one place: any :class:`~rlops.common.policy_ref.PolicyRef` (a version,
an alias, a qualified name) or a local folder, to a network and the decision rule it is served with.

Every step that needs a registered policy (capture, drift, training's warm start, stress,
evaluation, audit) goes through :func:`load_policy_ref`, so a policy means the same thing to all
of them and a missing one is the same clear error.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.agent_sdk.serving import choose_batch, exploration_probs
from rlops.common.errors import UserError
from rlops.common.policy_ref import PolicyRef
from rlops.registry.client import CHAMPION, TrackingError
from rlops.registry.versions import download_version_source
from rlops.sandbox.segments import compile_segment

if TYPE_CHECKING:
    import torch

    from rlops.common.params_operations import ExplorationParams
    from rlops.model.policy import PolicyNetwork
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack
    from rlops.sandbox.traces import TracePolicy


@dataclass(frozen=True)
class LoadedPolicy:
    """A policy network and the reference it was resolved from (``ref.version`` is set)."""

    ref: PolicyRef
    network: PolicyNetwork

    @property
    def version(self) -> str:
        return str(self.ref.version)


def resolve(ctx: StepServices, ref: str | int | PolicyRef) -> PolicyRef | None:
    """``ref`` with its alias resolved to a version; None for an alias that is not set. A
    version the registry does not know is a UserError."""
    parsed = PolicyRef.parse(ref, ctx.scenario)
    if parsed.is_rules:
        raise UserError("policy 'rules' is the pack's rule engine, not a registered policy")
    if parsed.alias is not None:
        version = ctx.tracker.get_alias(parsed.model_name, parsed.alias)
        return parsed.resolved(version) if version is not None else None
    try:
        ctx.tracker.model_version_source(parsed.model_name, str(parsed.version))
    except TrackingError as exc:
        code = str(getattr(exc.__cause__, "error_code", ""))
        if code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise UserError(
                f"{parsed.model_name} has no version {parsed.version}; pass a registered "
                "version (see the MLflow model registry or the output of `rlops train policy`)"
            ) from None
        raise
    return parsed


def download(ctx: StepServices, ref: PolicyRef, dst: Path) -> Path:
    """The folder of a resolved registry version's network, downloaded under ``dst``."""
    from rlops.model.policy_io import CONFIG_FILE

    source = ctx.tracker.model_version_source(ref.model_name, str(ref.version))
    folder = download_version_source(ctx.tracker, source, dst / f"v{ref.version}")
    found = sorted(Path(folder).rglob(CONFIG_FILE)) if Path(folder).is_dir() else []
    if not found:
        raise UserError(
            f"{ref} (source {source}) holds no {CONFIG_FILE}; expected a folder written "
            "by rlops.model.policy_io.save_policy"
        )
    return found[0].parent


def load_policy_ref(
    ctx: StepServices, ref: str | int | PolicyRef | Path, dst: Path | None = None
) -> LoadedPolicy | None:
    """The network behind ``ref`` (a local policy folder works too, for experiments), in eval
    mode; None when ``ref`` is an alias that is not set (e.g. no champion yet)."""
    from rlops.model.policy_io import load_policy

    local = Path(str(ref)) if not isinstance(ref, PolicyRef) else None
    if local is not None and local.is_dir():
        return LoadedPolicy(PolicyRef(ctx.scenario, alias=None, version=local.name), load_policy(local).eval())
    resolved = resolve(ctx, ref)  # type: ignore[arg-type]  # ref is a PolicyRef once local is None
    if resolved is None:
        return None
    folder = dst or Path(tempfile.mkdtemp(prefix="rlops-policy-", dir=ctx.local_dir("policies")))
    return LoadedPolicy(resolved, load_policy(download(ctx, resolved, folder)).eval())


def champion_policy(ctx: StepServices, dst: Path) -> tuple[str | None, PolicyNetwork | None]:
    """The current champion's version and network (None, None when there is none)."""
    loaded = load_policy_ref(ctx, CHAMPION, dst)
    return (loaded.version, loaded.network) if loaded is not None else (None, None)


@dataclass(frozen=True)
class ChampionTrace:
    """The policy a capture or a drift check traces with."""

    policy: TracePolicy
    version: str
    """the champion's ``<scenario>-policy/<version>``, or ``rules``"""
    warning: str | None = None
    """why the champion could not be loaded, when the rule engine stands in for it (a registry outage)"""


def champion_trace_policy(services: StepServices, pack: Pack, seed: int, deterministic: bool = False) -> ChampionTrace:
    """The champion as a tracing policy (sampled actions with logp/entropy/value, drawn from ``seed``
    — the params' ``seed``; its most likely action with ``deterministic``), or the rule engine when
    no champion is registered yet."""
    from rlops.sandbox.policies import rule_policy

    try:
        version, policy = champion_policy(services, Path(tempfile.mkdtemp(prefix="rlops-champion-")))
    except Exception as exc:  # noqa: BLE001 - a registry outage must not stop capture
        return ChampionTrace(rule_policy, "rules", f"champion unavailable ({exc}); traced the rule engine")
    if policy is None:
        return ChampionTrace(rule_policy, "rules")
    import torch

    gen = torch.Generator().manual_seed(seed)

    def act(env: Any) -> Any:
        out = policy.act(env.observe(), deterministic=deterministic, generator=gen)
        return out.action, {"logp": out.logp, "entropy": out.entropy, "value": out.value}

    return ChampionTrace(act, f"{services.scenario}-policy/{version}")


def serving_trace_policy(services: StepServices, pack: Pack, seed: int, cfg: ExplorationParams) -> ChampionTrace:
    """What serves production, as a tracing policy: the champion's greedy choice (or the rule
    engine's, before a first champion), and with ``cfg.share`` (``cfg``: the params' ``exploration:``
    block) an action drawn from the exploration distribution, as a policy client serves them
    (:func:`rlops.agent_sdk.serving.choose_batch`); ``logp`` is the log of the true propensity and
    ``explored`` marks the drawn decisions."""
    import numpy as np
    import torch

    off = compile_segment(pack.scenario.spec, cfg.off_segment) if cfg.off_segment else None
    try:
        version, policy = champion_policy(services, Path(tempfile.mkdtemp(prefix="rlops-champion-")))
        warning = None
    except Exception as exc:  # noqa: BLE001 - a registry outage must not stop capture
        version, policy, warning = None, None, f"champion unavailable ({exc}); traced the rule engine"
    rng = np.random.default_rng(seed)
    no_champion = f"no_champion: {services.scenario}-policy has no champion alias yet"

    def act(env: Any) -> Any:
        mask = env.action_masks()
        legal = mask.cpu().numpy()
        extras: dict[str, Any] = {}
        probs = None
        if policy is None:
            choice = env.scenario.rule_actions(env.S, mask).cpu().numpy().astype(np.int64)
        else:
            out = policy.act(env.observe(), deterministic=True)
            choice = out.action.cpu().numpy().astype(np.int64)
            probs = out.probs.detach().cpu().numpy().astype(np.float64)
            extras = {"entropy": out.entropy, "value": out.value}
        share = np.full(len(choice), cfg.share)
        if off is not None:
            share[off(env.S).cpu().numpy().astype(bool)] = 0.0
        u = rng.random((len(choice), 2))
        u[:, 0] = np.where(share > 0, u[:, 0], 1.0)  # a request of the off segment never explores
        a, propensity = choose_batch(choice, exploration_probs(legal, probs, cfg.distribution), cfg.share, u)
        propensity = np.where(share > 0, propensity, 1.0)
        extras.update(
            {
                "logp": torch.as_tensor(np.log(propensity), dtype=torch.float32),
                "explored": torch.as_tensor(a != choice),
            }
        )
        if policy is None:  # as a policy client answers before a first champion
            extras["fallback"] = torch.ones(len(a), dtype=torch.bool)
            extras["fallback_reason"] = np.full(len(a), no_champion, dtype=object)
        return torch.as_tensor(a, dtype=torch.int64, device=mask.device), extras

    name = "rules" if policy is None else f"{services.scenario}-policy/{version}"
    return ChampionTrace(act, name, warning)


def greedy_act(policy: PolicyNetwork) -> Any:
    """The serving decision rule as a sandbox policy: the most probable legal action."""

    def act(env: Any) -> torch.Tensor:
        return policy.act(env.observe(), deterministic=True).action.to(env.device)

    return act
