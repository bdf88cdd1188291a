"""What a scenario sends: generated arrivals and lengths, request classes, closed-loop
client populations, load in stages of different rates, and request traces (their file
formats, statistics and transformations, and the ``servesim trace`` command).

Produces numpy arrays (:class:`~sim.workload.requests.Requests`); knows nothing of
replicas, policies or costs. May import only :mod:`sim.errors`, :mod:`sim.configtools`
and the package version.
"""
