"""Measured against predicted: real serving runs (vLLM benchmark results, replays, public
end-to-end rows) compared request by request or row by row with the simulator, and the
fits of the priors that the public rows support.

An application layer: may import everything except :mod:`sim.study` and the CLI.
"""
