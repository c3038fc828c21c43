"""How the decision map changes under a what-if: which state clusters change their top action.

The states both policies decided in on the held-out episodes, where more than one action was legal
(a forced step decides nothing), are clustered as the console's
decision map clusters trace rows (k-means over the encoded state features and legal-action mask,
:func:`rlops.pipeline_steps.labels.select.cluster_states`; names from the dominant observed fields,
:func:`rlops.pipeline_steps.labels.select.cluster_names`). Each policy then decides in *every* state of a
cluster (its greedy action on the same observation), so a cluster's top action of the champion
and of the what-if policy are compared on the same states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import torch

from rlops.pipeline_steps.labels.select import cluster_names, cluster_states
from rlops.sandbox.pack import Pack
from rlops.whatif.episodes import Played

#: States the map clusters at most (an even sample of the visited ones beyond).
MAX_STATES = 20_000

GreedyFn = Callable[[torch.Tensor], torch.Tensor]


def _fields(pack: Pack, states: np.ndarray) -> list[tuple[str, str, pd.Series]]:
    """The observed state fields of ``states`` as the console names clusters by them."""
    out = []
    for f in pack.scenario.spec.fields:
        if not f.observed:
            continue
        col = states[:, pack.scenario.columns[f.path]]
        if f.type == "enum":
            out.append((f.path, "category", pd.Series(np.asarray(f.values, dtype=object)[col.astype(int)])))
        elif f.type == "bool":
            out.append((f.path, "category", pd.Series(col > 0.5)))
        else:
            out.append((f.path, "number", pd.Series(col)))
    return out


def _top(actions: np.ndarray, n_actions: int) -> tuple[int, float]:
    counts = np.bincount(actions, minlength=n_actions)
    top = int(counts.argmax())
    return top, float(counts[top] / max(actions.size, 1))


def decision_map_change(
    pack: Pack, champion: Played, whatif: Played, champ_greedy: GreedyFn, whatif_greedy: GreedyFn, k: int, seed: int
) -> dict[str, Any]:
    """Per cluster: its name, size, the top action (and its share) of each policy and the share of
    states where the two decide differently; ``changed`` lists the clusters whose top action moved."""
    layout = pack.scenario.layout
    n_feat = layout.n_features + pack.scenario.n_actions  # the features and the legal-action mask
    states = np.concatenate([champion.states, whatif.states])
    obs = np.concatenate([champion.observations, whatif.observations])
    choice = obs[:, layout.n_features : n_feat].sum(axis=1) >= 2  # a forced step decides nothing
    states, obs = states[choice], obs[choice]
    if len(states) > MAX_STATES:  # an even, deterministic sample
        idx = np.linspace(0, len(states) - 1, MAX_STATES).round().astype(np.int64)
        states, obs = states[idx], obs[idx]
    if not len(states):
        return {"states": 0, "clusters": [], "changed": [], "decisions_changed": 0.0}
    obs_t = torch.from_numpy(obs)
    labels = cluster_states(obs_t[:, :n_feat].float(), k, seed).numpy()
    with torch.no_grad():
        a_champ = champ_greedy(obs_t).cpu().numpy().astype(np.int64)
        a_what = whatif_greedy(obs_t).cpu().numpy().astype(np.int64)
    names = cluster_names(_fields(pack, states), labels)
    actions = pack.scenario.action_names
    clusters: list[dict[str, Any]] = []
    for c in np.unique(labels):
        m = labels == c
        top_c, share_c = _top(a_champ[m], len(actions))
        top_w, share_w = _top(a_what[m], len(actions))
        clusters.append(
            {
                "cluster": int(c),
                "name": names.get(int(c), f"cluster {int(c)}"),
                "states": int(m.sum()),
                "champion_top_action": actions[top_c],
                "champion_top_share": round(share_c, 4),
                "whatif_top_action": actions[top_w],
                "whatif_top_share": round(share_w, 4),
                "decisions_changed": round(float((a_champ[m] != a_what[m]).mean()), 4),
                "top_action_changed": top_c != top_w,
            }
        )
    clusters.sort(key=lambda r: -int(r["states"]))
    return {
        "states": int(len(states)),
        "clusters": clusters,
        "changed": [r["name"] for r in clusters if r["top_action_changed"]],
        "decisions_changed": round(float((a_champ != a_what).mean()), 4) if len(states) else 0.0,
    }


__all__ = ["MAX_STATES", "decision_map_change"]
