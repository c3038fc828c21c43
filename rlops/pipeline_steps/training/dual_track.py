"""The dual track inside policy training: the behaviour-cloning warm start from relabelled captured
traces and finished human labels (see :mod:`rlops.model.behaviour_cloning`); which reward source a
run uses is resolved with its other inputs (:mod:`rlops.pipeline_steps.training.setup`)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rlops.model.behaviour_cloning import BCConfig, behaviour_clone
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.pipeline_steps.labels.select import labels_as_imitation_batch
from rlops.pipeline_steps.labels.step import finished_labels
from rlops.pipeline_steps.training.relabel import labelled_steps

if TYPE_CHECKING:
    from rlops.common.params_model import QueueConfig
    from rlops.model.policy import PolicyNetwork
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.pipeline_steps.training.setup import TrainingSetup
    from rlops.sandbox.pack import Pack

log = logging.getLogger(__name__)


def human_labels(services: StepServices, queue: QueueConfig, pack: Pack) -> tuple[Any, Any, Any] | None:
    """``(obs, masks, actions)`` of the label queue's finished labels (None when there are none)."""
    labels = finished_labels(services, queue)
    if labels.empty:
        return None
    batch = labels_as_imitation_batch(pack, labels)
    return batch.obs, batch.masks, batch.actions


def warm_start(services: StepServices, setup: TrainingSetup, cfg: Any) -> tuple[PolicyNetwork | None, dict[str, Any]]:
    """A policy cloned from the run key's high-score relabelled steps, or ``(None, {reason})`` when
    there is nothing to clone from (no relabelled traces, too few steps, or ``train.bc_warm_start``
    is false)."""
    train, pack = setup.train, setup.pack
    if not train.bc_warm_start:
        return None, {"skipped": "train.bc_warm_start is false"}
    data = labelled_steps(services, pack, setup.relabel.window_hours)
    human = human_labels(services, setup.label_queue, pack)
    if data is None and human is None:
        return None, {"skipped": "no relabelled traces for this run key (rlops train relabel) and no human labels"}
    import torch

    if data is None:
        assert human is not None
        data = (*(t[:0] for t in human), torch.zeros(0))
    if human is not None:
        # A person's label is imitated whatever the model's score: it ranks with the best steps.
        top = float(data[3].max()) if data[3].numel() else 0.0
        data = tuple(
            torch.cat([a, b.to(a.dtype) if b.dtype != a.dtype else b])
            for a, b in zip(data, (*human[:3], torch.full((human[0].shape[0],), top)))
        )
    obs, masks, actions, scores = data
    bc_cfg = BCConfig(top_fraction=train.bc_top_fraction, epochs=train.bc_epochs, seed=int(cfg.seed))
    policy = PolicyNetwork(
        PolicyConfig.from_layout(
            pack.scenario.layout,
            hidden_sizes=tuple(cfg.hidden_sizes),
            embed_dim=cfg.embed_dim,
            activation=cfg.activation,
        )
    )
    res = behaviour_clone(policy, obs, masks, actions, scores, bc_cfg)
    if res is None:
        return None, {"skipped": f"fewer than {bc_cfg.min_steps} high-score choice steps to imitate"}
    log.info(
        "behaviour cloning: %d of %d steps imitated (accuracy %.3f)", res.steps_imitated, res.steps_scored, res.accuracy
    )
    return policy, asdict(res)


__all__ = ["warm_start"]
