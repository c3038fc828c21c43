"""Reward what-ifs: change a reward's weights or declared parameters, train a policy under the
changed reward, and compare it with the champion on the pack's KPIs (see docs/whatif.md)."""
