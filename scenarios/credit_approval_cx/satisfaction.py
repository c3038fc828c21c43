"""The hidden customer-satisfaction outcome of this pack: what the scripted reward does not see.

Retired applicants want to talk to a person: a case of theirs handed to a human underwriter ends
with a satisfied customer, worth ``BONUS`` margins of lifetime value. Nothing in ``reward_v1.py``
pays for it (escalation only costs the underwriter's time), so a policy trained on the scripted
reward never escalates; labellers who know the customer base do. The true objective of the pack
is the scripted reward plus this term; :func:`satisfaction` has the signature of a reward hook
(``BatchedEnv.add_reward_hook``), so the true return is measured by the environment itself.
"""

import torch

BONUS = 3.0


def satisfaction(t):
    retired = t.s.user_profile.employment == "retired"
    return torch.where((t.action == "escalate_to_human") & retired, BONUS, 0.0)
