"""The learners of rlops.

* :mod:`model.policy` — the actor-critic policy network (MLP + attention over the action history,
  the action mask as input and on the logits), serving export and save/load;
* :mod:`model.ppo` / :mod:`model.ppo_config` — masked PPO on a batched sandbox environment
  (``train(cfg, env, tracker) -> TrainResult``), with checkpoints (:mod:`model.checkpoint`) and
  the EWC / action-smoothing regularisers (:mod:`model.ewc`);
* :mod:`model.reward_model` / :mod:`model.reward_pairs` — the Bradley–Terry reward model and the
  sandbox preference pairs it learns from.

Submodules are imported explicitly; importing :mod:`model` itself loads nothing. The learners
depend on torch only and reach the sandbox through the objects passed in (a pack, an env), so
:mod:`model.policy` can ship alone with a served policy.
"""
