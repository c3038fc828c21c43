"""The learners of rlops.

* :mod:`rlops.model.policy` — the actor-critic policy network (MLP + attention over the action history,
  the action mask as input and on the logits), its masked action distributions
  (:mod:`rlops.model.masked_distributions`) and CPU kernels (:mod:`rlops.model.fast_ops`); serving
  export and save/load in :mod:`rlops.model.policy_io`;
* :mod:`rlops.model.ppo` (settings: :mod:`rlops.common.ppo_config`) — masked PPO on a batched sandbox environment
  (``train(cfg, env, tracker) -> TrainResult``): its rollout and advantages (:mod:`rlops.model.ppo_rollout`),
  update (:mod:`rlops.model.ppo_update`) and equations (:mod:`rlops.model.ppo_math`), its rollout storage
  and update batch (:mod:`rlops.model.rollout`), with checkpoints (:mod:`rlops.model.checkpoint`) and the EWC /
  action-smoothing regularisers (:mod:`rlops.model.ewc`);
* :mod:`rlops.model.reward_model` / :mod:`rlops.model.reward_pairs` — the Bradley–Terry reward model and the
  sandbox preference pairs it learns from.

Submodules are imported explicitly; importing :mod:`rlops.model` itself loads nothing. The learners
depend on torch only and reach the sandbox through the objects passed in (a pack, an env), so
:mod:`rlops.model.policy` and :mod:`rlops.model.policy_io` can ship alone with a served policy.
"""
