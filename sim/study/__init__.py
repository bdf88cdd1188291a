"""Many simulations at once: rate sweeps, capacity search, side-by-side policy
comparison, the backends that run independent points (in process, a local pool, Ray),
and the HTML report of a sweep or capacity folder.

An application layer: may import everything below it, never :mod:`sim.validate` or the
CLI.
"""
