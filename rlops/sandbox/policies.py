"""Reference policies and paired evaluation.

A policy here is any ``act(env) -> actions`` callable over a :class:`BatchedEnv` (it may read
``env.observe()``, ``env.action_masks()`` or, for the pack's oracle, the hidden state).
:func:`evaluate_policy` runs exactly one episode per seed, so two policies evaluated with the same
``seed`` face the same applicants, latencies and random events: a paired comparison.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import Pack
from rlops.sandbox.pack_files import check_pack_file

Tensor = torch.Tensor
ActFn = Callable[[BatchedEnv], Tensor]


def random_policy(seed: int = 0) -> ActFn:
    """Uniform over legal actions."""
    gen: dict[str, torch.Generator] = {}

    def act(env: BatchedEnv) -> Tensor:
        g = gen.setdefault("g", torch.Generator(device=env.device).manual_seed(seed))
        noise = torch.rand(env.action_masks().shape, generator=g, device=env.device)
        return torch.where(env.action_masks(), noise + 1.0, torch.zeros_like(noise)).argmax(dim=1)

    return act


def rule_policy(env: BatchedEnv) -> Tensor:
    """The pack's rule engine (``rule_policy:`` in scenario.yaml): what the live agent falls back to."""
    return env.scenario.rule_actions(env.S, env.action_masks())


def load_oracle(pack: Pack) -> ActFn | None:
    """The pack's oracle (``oracle.py`` with ``make_oracle(pack)``), or None when it has none.
    The file must lie inside the pack; a failure to import or build it is a :class:`PackError`."""
    path = pack.path / "oracle.py"
    if not path.exists() and not path.is_symlink():
        return None
    check_pack_file(path, pack.path)
    spec = importlib.util.spec_from_file_location(f"rlops_oracle_{pack.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        make = getattr(module, "make_oracle", None)
        if not callable(make):
            raise PackError(str(path), None, "make_oracle", "an oracle module must define make_oracle(pack)")
        act = make(pack)
    except PackError:
        raise
    except SyntaxError as exc:
        raise PackError(str(path), exc.lineno, "", f"syntax error in the oracle: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - pack code: any failure is an authoring error
        raise PackError(
            str(path), _line_in(exc, path), "", f"the oracle failed to load: {type(exc).__name__}: {exc}"
        ) from None
    if not callable(act):
        raise PackError(str(path), None, "make_oracle", "make_oracle(pack) must return a function act(env)")
    oracle: Callable[[BatchedEnv], torch.Tensor] = act
    return oracle


def _line_in(exc: BaseException, path: Path) -> int | None:
    """The last line of ``path`` in the traceback of ``exc``."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(path):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def probe_oracle(pack: Pack, episodes: int = 16) -> None:
    """Build the pack's oracle and let it act for one horizon on a small batch: it must return
    one legal action per episode. A :class:`PackError` otherwise (nothing when there is no oracle)."""
    act = load_oracle(pack)
    if act is None:
        return
    path = pack.path / "oracle.py"
    env = pack.make_env(episodes, illegal_action="noop")
    for _ in range(pack.scenario.spec.horizon):
        try:
            actions = act(env)
        except Exception as exc:  # noqa: BLE001 - pack code
            raise PackError(
                str(path), _line_in(exc, path), "", f"the oracle's act(env) raised {type(exc).__name__}: {exc}"
            ) from None
        if not (
            isinstance(actions, Tensor)
            and actions.shape == (env.num_envs,)
            and not actions.is_floating_point()
            and actions.dtype != torch.bool
        ):
            raise PackError(
                str(path),
                None,
                "",
                f"the oracle's act(env) must return an integer tensor "
                f"[{env.num_envs}] of actions, got {_describe(actions)}",
            )
        if not bool(((actions >= 0) & (actions < env.n_actions)).all()) or not bool(
            env.action_masks().gather(1, actions.long().unsqueeze(1)).all()
        ):
            raise PackError(str(path), None, "", "the oracle's act(env) returned an action that is not legal")
        env.step(actions)


def _describe(x: object) -> str:
    if isinstance(x, Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return type(x).__name__


@dataclass
class EvalResult:
    """Per-episode outcomes of one policy on a fixed set of seeded episodes."""

    returns: Tensor
    lengths: Tensor
    completed: Tensor
    human_takeover: Tensor
    illegal_actions: Tensor
    handling_ms: Tensor
    segments: Tensor
    segment_names: list[str]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_return(self) -> float:
        return float(self.returns.mean())

    def summary(self) -> dict[str, float]:
        n = self.returns.numel()
        return {
            "episodes": n,
            "mean_return": self.mean_return,
            "std_return": float(self.returns.std()) if n > 1 else 0.0,
            "completion_rate": float(self.completed.float().mean()),
            "human_takeover_rate": float(self.human_takeover.float().mean()),
            "illegal_action_rate": float(self.illegal_actions.sum()) / max(float(self.lengths.sum()), 1.0),
            "illegal_actions": int(self.illegal_actions.sum()),
            "mean_handling_ms": float(self.handling_ms.mean()),
        }


def evaluate_policy(
    pack: Pack,
    act: ActFn,
    episodes: int = 10_000,
    seed: int = 1_000_000,
    reward_fn: str | None = None,
    profile: str | None = None,
    device: str | torch.device = "cpu",
    env: BatchedEnv | None = None,
) -> EvalResult:
    """Run one episode for each seed ``seed .. seed + episodes - 1`` and collect its outcome.

    Illegal actions are not executed (the episode's state is left as it was) and are counted.
    In a scenario with ``roles:``, ``extra["role_returns"]`` splits each return into the team's
    part and each role's own (``RewardRuntime.by_role``); the parts sum to the return.
    """
    env = env or BatchedEnv(
        pack.scenario,
        pack.reward_fn(reward_fn),
        num_envs=episodes,
        profile=profile,
        device=device,
        illegal_action="noop",
    )
    env.reset(seed)
    n = env.num_envs
    live = torch.ones(n, dtype=torch.bool, device=env.device)
    returns = torch.zeros(n, device=env.device)
    lengths = torch.zeros(n, device=env.device)
    completed = torch.zeros(n, dtype=torch.bool, device=env.device)
    takeover = torch.zeros(n, dtype=torch.bool, device=env.device)
    illegal = torch.zeros(n, device=env.device)
    handling = torch.zeros(n, device=env.device)
    segments = env.S[:, env.scenario.columns["episode.segment"]].clone()
    parts = {k: torch.zeros(n, device=env.device) for k in ("team", *env.role_names)} if env.role_names else {}
    c_elapsed = env.scenario.columns["episode.elapsed_ms"]
    for _ in range(env.horizon):
        elapsed_before = env.S[:, c_elapsed].clone()
        actions = act(env)
        _, reward, terminated, truncated, info = env.step(actions)
        returns += torch.where(live, reward, torch.zeros_like(reward))
        for k, v in (env.reward.by_role(info.reward_breakdown) if parts else {}).items():
            parts[k] += torch.where(live, v, torch.zeros_like(v))
        illegal += (live & info.illegal).float()
        takeover |= live & info.human_takeover
        done = live & (terminated | truncated)
        lengths = torch.where(done, info.episode_length, lengths)
        handling = torch.where(done, elapsed_before + info.latency_ms * (~info.illegal).float(), handling)
        completed |= done & terminated & ~info.human_takeover
        live = live & ~done
        if not bool(live.any()):
            break
    names = ["base"] + [p.name for p in env.scenario.spec.profiles[env.profile].population]
    extra = {"role_returns": {k: v.cpu() for k, v in parts.items()}} if parts else {}
    return EvalResult(
        returns.cpu(),
        lengths.cpu(),
        completed.cpu(),
        takeover.cpu(),
        illegal.cpu(),
        handling.cpu(),
        segments.cpu(),
        names,
        extra,
    )
