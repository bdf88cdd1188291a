"""servesim's calibrator: times prefill and decode work with torch and fits a cost profile.

Run it as ``servesim calibrate ...`` or ``python -m calibrate ...``. Timing needs torch,
numpy, scipy and pyyaml; fitting saved measurements again (``--refit``) needs all but
torch; never simpy. The one thing it hands the simulator is the profile file that
:mod:`sim.cost.profile` reads.
"""
