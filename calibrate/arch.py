"""Model architectures to calibrate: a sim/ preset or a HuggingFace ``config.json``.

Both routes yield the same :class:`sim.cost.specs.ModelSpec` (the config reader is
:func:`sim.cost.hfconfig.from_hf_config`), so the simulator and the calibrator describe a model
with one table; the per-GPU shard of tensor parallelism is :func:`sim.cost.shard.shard`.
"""

from __future__ import annotations

from pathlib import Path

from sim.cost.hfconfig import from_hf_config
from sim.cost.presets import model_preset
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError


def resolve_model(preset: str | None, hf_config: Path | None) -> ModelSpec:
    """The model named by ``--model`` or described by ``--hf-config``; both at once is an
    error (which of the two was meant?)."""
    if hf_config is not None and preset is not None:
        raise ServesimError(f"got --model {preset} as well: give --model PRESET or "
                            "--hf-config FILE, not both", where="--hf-config")
    if hf_config is not None:
        return from_hf_config(hf_config)
    if preset is None:
        raise ServesimError("give --model PRESET or --hf-config FILE")
    return model_preset(preset)
