"""``rlops init``: a scenario pack inferred from traces, or the smallest valid one from a list of
actions and fields — see :mod:`rlops.pack_init.generate` and docs/init.md."""
