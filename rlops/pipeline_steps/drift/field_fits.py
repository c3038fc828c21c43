"""Maximum-likelihood fits of one field's initial distribution to live traces.

The fits a calibration is made of (:mod:`rlops.pipeline_steps.drift.calibrate`), also used per
population segment by the mixture fit (:mod:`rlops.pipeline_steps.drift.mixture`): which fields can
be fitted, a field's initial value per episode, and the fit within the field's declared family.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlops.trace_store.states import STATE_PREFIX, field_values

if TYPE_CHECKING:  # numpy and pandas are imported where they run: registering the CLI stays light
    import numpy as np
    import pandas as pd

    from rlops.sandbox.pack import Pack
    from rlops.sandbox.spec import FieldSpec


def fittable(f: FieldSpec) -> bool:
    """Observed, and initialised from a distribution whose parameters are constants."""
    if not f.observed or f.init.dist is None:
        return False
    params = f.init.params
    if f.init.dist == "categorical":
        probs = params["probs"]
        vals = probs.values() if isinstance(probs, dict) else probs
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in params.values())


def unfittable_reason(f: FieldSpec) -> str:
    """Why :func:`fittable` said no, in the words the calibration report uses."""
    if not f.observed:
        return "not observed: production traces do not carry it"
    if f.init.dist is None:
        return "no sampling distribution (a constant or expression initial value)"
    return f"the {f.init.dist} distribution's parameters are expressions, not constants"


def changed_by_actions(pack: Pack) -> set[str]:
    return {target for a in pack.scenario.spec.actions for e in a.effects for target in e.set}


def initial_values(pack: Pack, df: pd.DataFrame, path: str, changed: bool) -> np.ndarray:
    """A field's initial value per episode (see module docstring); NaNs dropped."""
    import numpy as np

    out: np.ndarray = initial_series(pack, df, path, changed).to_numpy(np.float64)
    return out


def initial_series(pack: Pack, df: pd.DataFrame, path: str, changed: bool) -> pd.Series:
    """:func:`initial_values` indexed by episode id (episodes in sorted order)."""
    import numpy as np
    import pandas as pd

    col = STATE_PREFIX + path
    if col not in df.columns:
        return pd.Series([], dtype=np.float64)
    vals = field_values(pack, path, df[col])
    frame = pd.DataFrame({"e": df["episode_id"].to_numpy(), "s": pd.to_numeric(df["step"]).to_numpy(), "v": vals})
    frame = frame[frame["s"] == 0] if changed else frame.dropna(subset=["v"])
    first = frame.sort_values(["e", "s"], kind="stable").drop_duplicates("e").dropna(subset=["v"])
    return pd.Series(first["v"].to_numpy(np.float64), index=first["e"].to_numpy())


def fit_field(f: FieldSpec, x: np.ndarray, w: np.ndarray | None = None) -> dict[str, Any]:
    """The MLE init spec of ``f``'s declared family from values ``x`` (enum codes, bools 0/1),
    each value weighted by ``w`` when given (a population segment's responsibilities)."""
    import numpy as np

    dist = f.init.dist
    w = np.ones_like(x, dtype=np.float64) if w is None else np.asarray(w, dtype=np.float64)

    def moments(v: np.ndarray, wv: np.ndarray) -> tuple[float, float]:
        m = float(np.average(v, weights=wv))
        return m, max(float(np.sqrt(np.average((v - m) ** 2, weights=wv))), 1e-6)

    if dist == "normal":
        mean, std = moments(x, w)
        return {"dist": "normal", "mean": mean, "std": std}
    if dist == "lognormal":
        pos = x > 0
        if not pos.any():
            raise ValueError(f"field {f.path}: no positive values to fit a lognormal")
        mean, sigma = moments(np.log(x[pos]), w[pos])
        return {"dist": "lognormal", "mean": mean, "sigma": sigma}
    if dist == "uniform":
        return {"dist": "uniform", "low": float(x.min()), "high": float(x.max())}
    if dist == "categorical":
        counts = np.bincount(x.astype(np.int64), weights=w, minlength=len(f.values))[: len(f.values)]
        return {"dist": "categorical", "probs": {v: float(c) / float(counts.sum()) for v, c in zip(f.values, counts)}}
    if dist == "bernoulli":
        return {"dist": "bernoulli", "p": float(np.average(x, weights=w))}
    raise ValueError(f"field {f.path}: cannot fit distribution {dist!r}")


def declared(f: FieldSpec) -> dict[str, Any]:
    return {"dist": f.init.dist, **{k: (dict(v) if isinstance(v, dict) else v) for k, v in f.init.params.items()}}


__all__ = [
    "changed_by_actions",
    "declared",
    "fit_field",
    "fittable",
    "initial_series",
    "initial_values",
    "unfittable_reason",
]
