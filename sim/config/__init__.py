"""Scenario files: YAML to validated, frozen dataclasses (the scenario, and the
disaggregated and fault sections), with ``--set`` overrides; every key, type and bound
is checked at load, and loading writes nothing.

May import :mod:`sim.policies` (the policy names), the core's state, :mod:`sim.cost`,
:mod:`sim.workload` and the base modules; the core's machinery and everything above
read it.
"""
