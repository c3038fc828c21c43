"""The simulated production timeline (``rlops simulate``): the pack's DAGs as they ship, run over
simulated days against a production world scripted by events.

Entry points: :func:`rlops.timeline.simulate.run_timeline` (the loop over simulated ticks),
:class:`rlops.timeline.world.ProductionWorld` (the production stand-in with the events in force),
:func:`rlops.timeline.events.parse_events` (the events file), :class:`rlops.timeline.regret.RegretMeter`
(regret against the best policy of the world in force) and :mod:`rlops.timeline.report`.

It sits above ``dags/``: it drives the DAG files through :mod:`rlops.timeline.dag_driver`, and nothing
in the library imports it (``tests/test_import_cycles.py`` checks).
"""
