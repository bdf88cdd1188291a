"""Step-time cost models and what they are built from: the batch shape a model prices,
the roofline and linear models, measured profiles (their formulas, file format, fitting
and the shipped set), model and GPU specifications with tensor-parallel sharding, GPU
memory and the KV blocks it holds (:mod:`sim.cost.memory`), the API server's
per-request frontend, the fitted priors, and (in :mod:`sim.cost.tables`)
the public kernel tables profiles are built from.

A cost model is a pure function of a :class:`~sim.cost.shape.StepShape`. This layer may
import only :mod:`sim.errors` and :mod:`sim.configtools` (annotations may name the
scenario type); :mod:`calibrate` imports it, so nothing here imports simpy or torch.
"""
