"""What a production agent imports to feed rlops: the three interfaces, the tracer and the
``@rollout`` decorator (see :mod:`rlops.agent_sdk.tracer` for a complete example).

Only the standard library is needed (boto3 when the landing zone is on S3).
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
