"""servesim's simulator: replays LLM request traces through a simulated serving cluster.

Importing this package is cheap and pulls in neither simpy nor torch, so that
``calibrate`` can share the model tables (:mod:`sim.cost.specs`) and the profile
evaluator (:mod:`sim.cost.profile`, :mod:`sim.cost.profilefile`) without depending on the
simulator engine.
"""

__version__ = "0.1.0"
