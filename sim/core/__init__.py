"""The simulation's core, in two layers.

State (below the policies): requests in flight and their status codes
(:mod:`~sim.core.request`), the KV-cache manager that does all block accounting
(:mod:`~sim.core.kvmanager`), the prefix cache (:mod:`~sim.core.prefix`), bounded-memory
histograms and per-replica totals. These modules hold no clock and import only
:mod:`sim.cost` and the base modules; calibrate's replay loop uses them without simpy.

Machinery (above the policies and the configuration): the engine that routes arriving
requests (:mod:`~sim.core.engine`), the replicas that run one batch iteration per SimPy
event (:mod:`~sim.core.replica`), the decode set that advances running decodes in O(1)
per iteration, closed-loop clients, faults, disaggregated pools and the
:class:`~sim.core.result.RunResult` a run returns. These may import the state,
:mod:`sim.policies`, :mod:`sim.config`, :mod:`sim.cost` and :mod:`sim.workload`.
"""
