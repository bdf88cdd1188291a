"""``python -m calibrate``: the calibration command without the simulator installed."""

from calibrate.cli import main

raise SystemExit(main())
