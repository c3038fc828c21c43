"""The trace store: where the agents' decisions live once captured.

* :mod:`rlops.trace_store.store` — the layout (landing zone, ``scenario=/date=/hour=`` parquet
  partitions, quarantine, manifests) and the writers;
* :mod:`rlops.trace_store.query` — every read, DuckDB over the partitioned parquet, in bounded memory;
  its engines' settings and DuckDB database in :mod:`rlops.trace_store.engine`, the pandas reference
  in :mod:`rlops.trace_store.pandas_engine`, the time layout of partitions in
  :mod:`rlops.trace_store.time_partitions`;
* :mod:`rlops.trace_store.states` — trace rows turned back into the pack's observations, masks and
  action codes (what off-policy evaluation, relabelling and behaviour cloning read).
"""
