"""Public measured kernel tables (NVIDIA AIConfigurator's, read as data) turned into cost
profiles: GEMM, attention and collective tables with their interpolation, the profile
builder, the roofline's fitted factors, and the ``servesim profile`` command.

Used offline to build the profiles shipped in ``sim/data/profiles``; a simulation never
needs it. May import the rest of :mod:`sim.cost` and the base modules.
"""
