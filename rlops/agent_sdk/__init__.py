"""What a production agent imports to feed rlops: the three interfaces, the tracer and the
``@rollout`` decorator (see :mod:`rlops.agent_sdk.tracer` for a complete example).

Only the standard library is needed (boto3 when the landing zone is on S3).

MLflow: this package ships to production agents without the rest of rlops, so it cannot reach the
registry through :mod:`rlops.registry`. Its two MLflow readers and writers import ``mlflow``
themselves, on first use only: :mod:`rlops.agent_sdk.registry_source` (the policy client's
versions, aliases and models) and :mod:`rlops.agent_sdk.mlflow_tracing` (decisions exported as
MLflow traces). No other module of the package imports it.
"""

from rlops.agent_sdk.interfaces import ActionExecutor, EpisodeRef, ExecutionResult, RewardProvider, StateObserver
from rlops.agent_sdk.rollout import Episode, current_episode, rollout
from rlops.agent_sdk.tracer import Tracer, TraceWriteError, flatten_state, mask_text

__all__ = [
    "ActionExecutor",
    "Episode",
    "EpisodeRef",
    "ExecutionResult",
    "RewardProvider",
    "StateObserver",
    "TraceWriteError",
    "Tracer",
    "current_episode",
    "flatten_state",
    "mask_text",
    "rollout",
]
