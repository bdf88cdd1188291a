"""Scheduling decisions: the batching policies by their YAML name (one module each, one
line in :mod:`sim.policies.registry`), the batch and protocol they share
(:mod:`sim.policies.base`), the routers that pick a replica, and admission control
(rate limits, queue caps, client timeouts).

A policy reads a replica's state and asks the KV manager for blocks; it never changes
counts itself. May import the core's state (:mod:`sim.core.request`,
:mod:`sim.core.kvmanager`, :mod:`sim.core.prefix`), :mod:`sim.cost` and the base modules;
annotations may name the replica and configuration types above it.
"""
