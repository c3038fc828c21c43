"""The decision policy as an MLflow ``python_function`` model (models-from-code).

What a registered ``<scenario>-policy`` version holds (the folder ``policy_model/`` of its run)::

    MLmodel, requirements.txt, …          MLflow's model description and environment
    pyfunc_policy.py                       this file: the model code MLflow executes on load
    artifacts/policy/policy.pt|.npz|.json  the network (``rlops.model.policy_io.save_policy``; ``.npz``: the
                                           same weights for serving without torch, rlops.agent_sdk.numpy_policy)
    code/rlops/model/                      the ``rlops.model`` package (beside an empty ``rlops/__init__.py``),
                                           so a bare server can load it without rlops installed

**Input**: a DataFrame with one row per decision and one float column per value of the
encoded observation, named after the scenario's observation layout::

    <feature names of ObsLayout>  e.g. user_profile.age, user_profile.employment=retired, …
    mask.<action>                 1.0 when the action is legal in this state, else 0.0
    history.<i>                   the last actions, oldest first (0 = none, a+1 = action a)

(``rlops.agent_sdk.policy_client.ObservationEncoder`` turns a production state into such a row.)
**Output**: a DataFrame with ``action`` (name), ``action_index``, ``logp``, ``entropy``,
``value`` and one ``prob.<action>`` column per action. Decisions are greedy (the most probable
legal action), as in production.

Serve it with ``mlflow models serve -m models:/<scenario>-policy@champion --env-manager local``
and POST ``{"dataframe_split": {"columns": [...], "data": [[...]]}}`` to ``/invocations``.

MLflow loads this file as model code (module name ``code_model_<hex>``); only then does it call
``mlflow.models.set_model``. Imported as ``rlops.registry.pyfunc_policy`` it only offers
:func:`save_pyfunc_policy` and the wrapper class.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd
from mlflow.pyfunc.model import PythonModel

import rlops.model as model_pkg
from rlops.model.policy_io import CONFIG_FILE, load_policy

POLICY_ARTIFACT = "policy"
"""Key (and folder under ``artifacts/``) of the saved network inside the pyfunc model."""


class PolicyPyfunc(PythonModel):
    """Greedy decisions of a saved :class:`rlops.model.policy.PolicyNetwork`."""

    def load_context(self, context: Any) -> None:
        import torch

        folder = Path(context.artifacts[POLICY_ARTIFACT])
        self.policy = load_policy(folder).eval()
        meta = json.loads((folder / CONFIG_FILE).read_text()).get("metadata", {})
        self.action_names: list[str] = list(meta["action_names"])
        self.obs_columns: list[str] = list(meta["obs_columns"])
        self.metadata = meta
        self._torch = torch

    def predict_obs(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """Fast path without pandas: ``obs[N, D]`` → arrays ``action_index``, ``probs[N, A]``,
        ``logp``, ``entropy``, ``value`` (what the policy client calls)."""
        x = self._torch.from_numpy(np.array(obs, dtype=np.float32))  # a copy: inputs may be read-only
        out = self.policy.act(x.reshape(-1, len(self.obs_columns)), deterministic=True)
        return {
            "action_index": out.action.numpy(),
            "probs": out.probs.numpy(),
            "logp": out.logp.numpy(),
            "entropy": out.entropy.numpy(),
            "value": out.value.numpy(),
        }

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        missing = [c for c in self.obs_columns if c not in frame.columns]
        if missing:
            raise ValueError(
                f"policy input lacks {len(missing)} observation column(s), e.g. {missing[:5]}; "
                f"expected the {len(self.obs_columns)} columns of the scenario's observation "
                "layout (features, mask.<action>, history.<i>)"
            )
        res = self.predict_obs(frame[self.obs_columns].to_numpy(dtype=np.float32))
        out = pd.DataFrame(
            {
                "action": np.asarray(self.action_names, dtype=object)[res["action_index"]],
                "action_index": res["action_index"].astype(np.int64),
                "logp": res["logp"].astype(np.float64),
                "entropy": res["entropy"].astype(np.float64),
                "value": res["value"].astype(np.float64),
            }
        )
        for j, name in enumerate(self.action_names):
            out[f"prob.{name}"] = res["probs"][:, j].astype(np.float64)
        return out


def policy_signature(obs_columns: list[str], action_names: list[str]) -> Any:
    """Input/output schema of the pyfunc (column names and types)."""
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ColSpec, Schema

    inputs = Schema([ColSpec("double", c) for c in obs_columns])
    outputs = Schema(
        [
            ColSpec("string", "action"),
            ColSpec("long", "action_index"),
            ColSpec("double", "logp"),
            ColSpec("double", "entropy"),
            ColSpec("double", "value"),
            *[ColSpec("double", f"prob.{a}") for a in action_names],
        ]
    )
    return ModelSignature(inputs=inputs, outputs=outputs)


def _pins() -> list[str]:
    """Requirements pinned to this environment; given explicitly so MLflow does not start a
    subprocess to infer them."""
    from importlib.metadata import version

    return [f"{pkg}=={version(pkg)}" for pkg in ("mlflow", "torch", "numpy", "pandas")]


def save_pyfunc_policy(policy_dir: str | Path, dst: str | Path, input_example: pd.DataFrame | None = None) -> Path:
    """Write the pyfunc model for a policy saved by ``save_policy`` (whose metadata carries
    ``action_names`` and ``obs_columns``) to the new folder ``dst``. ``input_example`` (encoded
    observations) is stored with the model as the serving example."""
    meta = json.loads((Path(policy_dir) / CONFIG_FILE).read_text()).get("metadata", {})
    for key in ("action_names", "obs_columns"):
        if key not in meta:
            raise ValueError(
                f"{Path(policy_dir) / CONFIG_FILE}: metadata lacks '{key}'; save the policy with "
                "the scenario's action names and observation columns"
            )
    with tempfile.TemporaryDirectory() as staging, _pins_known_satisfied():
        mlflow.pyfunc.save_model(
            path=str(dst),
            python_model=str(Path(__file__).resolve()),
            artifacts={POLICY_ARTIFACT: str(policy_dir)},
            code_paths=[str(_stage_model_package(Path(staging)))],
            signature=policy_signature(meta["obs_columns"], meta["action_names"]),
            pip_requirements=_pins(),
            input_example=input_example,
            metadata={"rlops_kind": "policy", "n_actions": len(meta["action_names"])},
        )
    return Path(dst)


@contextlib.contextmanager
def _pins_known_satisfied() -> Iterator[None]:
    """Skip MLflow's check that the requirements are installed: :func:`_pins` reads them from this
    environment, so they are by construction, and the check maps every installed distribution to its
    modules first, which every training task would pay again in a full deployment's environment."""
    from mlflow.utils import environment

    check = getattr(environment, "warn_dependency_requirement_mismatches", None)
    if check is None:  # another MLflow: nothing to skip
        yield
        return

    def satisfied(model_requirements: list[str]) -> None:
        return None

    environment.warn_dependency_requirement_mismatches = satisfied  # type: ignore[attr-defined]
    try:
        yield
    finally:
        environment.warn_dependency_requirement_mismatches = check  # type: ignore[attr-defined]


def _stage_model_package(staging: Path) -> Path:
    """A copy of ``rlops.model`` under an otherwise empty ``rlops`` package in ``staging``: what a
    bare serving environment needs to import :mod:`rlops.model.policy_io` (nothing else of rlops)."""
    root = staging / "rlops"
    shutil.copytree(
        Path(model_pkg.__file__).resolve().parent, root / "model", ignore=shutil.ignore_patterns("__pycache__")
    )
    (root / "__init__.py").write_text("# the parts of rlops a served policy needs\n")
    return root


def saved_policy_dir(model_dir: str | Path) -> Path:
    """The network folder inside a downloaded pyfunc model folder."""
    d = Path(model_dir) / "artifacts" / POLICY_ARTIFACT
    if not d.is_dir():
        raise FileNotFoundError(f"{model_dir}: not an rlops policy model (no artifacts/{POLICY_ARTIFACT}/)")
    return d


if __name__.startswith("code_model_") or __name__ == "__main__":  # executed by MLflow as model code
    mlflow.models.set_model(PolicyPyfunc())
