"""A vLLM server's own flags in a scenario: the ``vllm`` section.

A user who runs ``vllm serve MODEL --max-model-len 8192 --gpu-memory-utilization 0.9
...`` can paste those flags, under vLLM's names (``max-model-len`` or
``max_model_len``), into a ``vllm`` section; each is moved to the servesim key it means
(:data:`MAPPED`) before the scenario is validated, and what the flags leave unset
takes the value ``vllm serve`` (the V1 engine, the OpenAI API server) would:

- chunked prefill (V1 always chunks): ``serving.policy: chunked``, whose per-iteration
  token budget is ``max_num_batched_tokens``;
- ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024 on a GPU reporting at least
  70 GiB that is not an A100, else 2048 and 256 (vLLM's ``get_batch_defaults``);
- no admission watermark (V1's KV-cache manager keeps none);
- prefix caching on (V1's default) where servesim models it (not for models with
  linear-attention layers, nor with swap preemption and no host tier): requests that
  carry prefix hashes share their cached blocks, and requests without them, unique
  prompts, share none.

``enable-expert-parallel`` sets ``hardware.ep`` to the tensor-parallel size times the
data-parallel size (vLLM's expert-parallel group); with it, ``data-parallel-size`` N is
data-parallel attention (``hardware.dp``: N ranks sharing the experts), and without it
N independent copies (``cluster.replicas``). ``kv-cache-dtype fp8`` and
``quantization fp8`` set the model's KV-cache and weight
dtypes (:data:`DTYPE_FLAGS`); ``speculative-config`` sets ``serving.speculative``'s method
and k (:mod:`sim.config.vllmspec`); ``kv-offloading-size`` and the host-memory KV
connectors of ``kv-transfer-config`` set a write-through ``serving.kv_offload``
(:mod:`sim.config.vllmconnector`); ``hf-overrides`` (and vLLM's older ``rope-scaling``
and ``rope-theta``) set ``model.hf_overrides``. Flags that change nothing a simulation
prices (``port``, ``served-model-name``, ..., :data:`NO_EFFECT`) are accepted; a flag for
something servesim does not model yet (other quantisations, eager mode, long partial
prefills) is an error naming it, as is any other name and a flag whose servesim key the
scenario also sets.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from sim.config.vllmcapture import CONFIG_KEYS as CAPTURE_KEYS
from sim.config.vllmcapture import FLAGS as CAPTURE_FLAGS
from sim.config.vllmcapture import capture_size
from sim.config.vllmconnector import HOST_TIER_FLAGS, host_tier_flag
from sim.config.vllmdefaults import raw_gpu, v1_defaults
from sim.config.vllmnames import (
    DTYPE_FLAGS,
    HUMAN_INTS,
    KERNEL,
    MAPPED,
    NO_EFFECT,
    ONLY,
    SAME,
    UNPRICED_QUANT,
    VLLM_BLOCK_SIZES,
    compilation_config,
    flag_name,
    flag_value,
    graph_setting,
    human_int,
    plain_name,
)
from sim.config.vllmspec import json_object, merge_speculative, speculative_keys
from sim.cost.presets import MODELS
from sim.errors import ServesimError
from sim.files import read_text
from sim.yamlload import parse_yaml, yaml_error


def section_mapping(name: str, value: Any) -> dict[str, Any]:
    """A copy of scenario section ``name`` as a mapping to add keys to: a ``model`` given
    as a preset name is ``{preset: NAME}``, a ``cost`` given as a kind (``measured``,
    ``roofline``) is that kind with its defaults, an absent or empty section is empty;
    any other value is refused, as the section would be without keys added to it."""
    if name == "model" and isinstance(value, str):
        value = {"preset": value}
    if name == "cost" and isinstance(value, str):
        value = {value: {}}  # `cost: roofline` is `roofline:` with its defaults
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ServesimError(f"got {value!r}, expected a mapping", where=name)
    return dict(value)


def apply_vllm(raw: dict[str, Any], default_gpu: str, base_dir: Path | None = None
               ) -> tuple[dict[str, Any], tuple[str, ...], tuple[Path, ...]]:
    """``raw`` (a scenario mapping) with its ``vllm`` section moved into the scenario's
    own keys, vLLM's defaults filling what it leaves unset (for ``hardware.gpu``, or
    ``default_gpu`` when the scenario names none); the notes the run's summary gives of
    flags accepted but not priced; and the files read (a config file). ``raw`` itself,
    no notes and no files when it has no such section. ``config: FILE`` reads vLLM's YAML
    config file (relative to ``base_dir``), the section's own flags winning, as the
    command line does over it. Errors name ``vllm.FLAG``, or the config file and the
    FLAG in it for a flag read from it."""
    if "vllm" not in raw:
        return raw, (), ()
    flags = raw["vllm"]
    if not isinstance(flags, dict):
        raise ServesimError(f"got {flags!r}, expected a mapping of vLLM flags", where="vllm")
    flags, files, in_file = _with_config_file(flags, base_dir)

    def origin(flag: str) -> Path | None:  # the config file, for a flag read from it
        return files[0] if flag in in_file else None

    out = {k: v for k, v in raw.items() if k != "vllm"}
    sections: dict[str, dict[str, Any]] = {}
    notes: list[str] = []

    def section(name: str) -> dict[str, Any]:
        if name not in sections:
            sections[name] = section_mapping(name, out.get(name))
        return sections[name]

    given: dict[str, tuple[str, Any]] = {}
    for flag, value in flags.items():
        try:
            name, value = _negated(flag, value)
            if name in given:
                raise ServesimError(f"given twice (as {given[name][0]!r} and {flag!r})",
                                    where=f"vllm.{flag}")
            given[name] = (str(flag), flag_value(flag, value))
        except ServesimError as exc:
            raise _located(exc, flag, origin(flag)) from None
    for name, (flag, value) in given.items():
        try:
            _apply_flag(name, flag, value, given, section, notes)
        except ServesimError as exc:
            raise _located(exc, flag, origin(flag)) from None
    serving = section("serving")
    own = out.get("serving")
    if (serving.get("cuda_graphs") == "none" and "cuda_graph_max_tokens" in serving
            and not (isinstance(own, dict) and "cuda_graph_max_tokens" in own)):
        # vLLM reads no capture size when it captures no graph (enforce-eager).
        del serving["cuda_graph_max_tokens"]
        notes.append("vllm: CUDA graphs are off, so the capture size given is not read")
    v1_defaults(serving, raw_gpu(section("hardware").get("gpu", default_gpu)))
    for name, value in sections.items():
        out[name] = value
    return out, tuple(notes), files


def _negated(flag: str, value: Any) -> tuple[str, Any]:
    """A flag's plain name and value: ``no-FLAG: true`` is ``FLAG: false``; a flag
    written with three dashes is refused."""
    if str(flag).startswith("---"):  # vLLM's parser reads one or two dashes, no more
        raise ServesimError(f"got {flag!r}: a flag starts with at most two dashes",
                            where=f"vllm.{flag}")
    name = plain_name(flag)
    if name != flag_name(flag):
        value = not _switch(value, f"vllm.{flag}")
    return name, value


def _switch(value: Any, where: str) -> bool:
    """A true/false flag's value; anything else (a string such as "false", a number) is
    refused rather than read by its truthiness."""
    if not isinstance(value, bool):
        raise ServesimError(f"got {value!r}, expected true or false", where=where)
    return value


def _located(exc: ServesimError, flag: str, from_file: Path | None) -> ServesimError:
    """``exc``, raised for ``vllm.FLAG``, named after the config file that gave the flag
    (``from_file``, when that file gave it) and the flag as the file spells it: the
    scenario does not hold it."""
    if from_file is None or exc.where is None or not exc.where.startswith(f"vllm.{flag}"):
        return exc
    return ServesimError(exc.message, str(from_file), exc.where.removeprefix("vllm."))


def _graphs(serving: dict[str, Any], mode: str, where: str) -> None:
    """Set ``serving.cuda_graphs`` to ``mode`` for the flag at ``where`` (enforce-eager,
    or a compilation setting that decides CUDA graphs); another value the scenario or
    another flag gives is a conflict (``auto`` yields)."""
    current = serving.get("cuda_graphs", "auto")
    if current not in ("auto", mode):
        what = "turns CUDA graphs off" if mode == "none" else f"asks for CUDA graphs {mode!r}"
        raise ServesimError(f"{what}, while the scenario sets serving.cuda_graphs "
                            f"{current!r}; give one of them", where=where)
    serving["cuda_graphs"] = mode


def _capture(serving: dict[str, Any], size: int, where: str) -> None:
    """Set ``serving.cuda_graph_max_tokens`` to ``size`` for the flag at ``where``;
    another value the scenario or another flag gives is a conflict."""
    current = serving.get("cuda_graph_max_tokens")
    if current is not None and current != size:
        raise ServesimError(f"sets the largest CUDA-graph capture size to {size} tokens, "
                            f"while serving.cuda_graph_max_tokens is {current!r} (from the "
                            "scenario or another flag); give one of them", where=where)
    serving["cuda_graph_max_tokens"] = size


def _only_capture(name: str, value: Any) -> bool:
    """Whether kernel flag ``name`` sets capture sizes and nothing else (then priced)."""
    if name in CAPTURE_FLAGS or name.partition(".")[2] in CAPTURE_KEYS:
        return True
    config = compilation_config(value, "") if name == "compilation_config" else None
    return isinstance(config, dict) and bool(config) and set(config) <= set(CAPTURE_KEYS)


def _apply_flag(name: str, flag: str, value: Any, given: dict[str, tuple[str, Any]],
                section: Callable[[str], dict[str, Any]], notes: list[str]) -> None:
    """Move vLLM flag ``name`` (spelt ``flag``, its value ``value``) into the scenario
    key it means, in the mapping ``section(NAME)`` returns; a flag accepted but not
    priced adds a line to ``notes``. ``given``: every flag of the section, by name."""
    where = f"vllm.{flag}"
    # Under expert parallelism data-parallel ranks share the experts: one replica of dp ranks.
    shared = given.get("enable_expert_parallel", ("", False))[1] is True
    if name in HUMAN_INTS:
        value = human_int(value, where, auto=name == "max_model_len")
        if value is None:
            return  # auto: the model's own context, as vLLM's fitting starts from
    if name == "block_size" and (isinstance(value, bool) or value not in VLLM_BLOCK_SIZES):
        raise ServesimError(f"got {value!r}; vLLM's --block-size takes "
                            f"{', '.join(map(str, VLLM_BLOCK_SIZES[:-1]))} or "
                            f"{VLLM_BLOCK_SIZES[-1]}", where=where)
    if name in MAPPED:
        sect, key = (("hardware", "dp") if name == "data_parallel_size" and shared
                     else MAPPED[name])
        target = section(sect)
        for k in (key, *SAME.get((sect, key), ())):
            if k in target:
                raise ServesimError(f"sets {sect}.{k}, which the scenario sets too; give "
                                    "one of them", where=where)
        target[key] = value
    elif name == "scheduling_policy":
        if value not in ("fcfs", "priority"):
            raise ServesimError(f"got {value!r}; vLLM's policies are fcfs and priority",
                                where=where)
        section("serving")["priority"] = value == "priority"
    elif name == "enable_chunked_prefill":
        chunked = _switch(value, where)
        if "policy" in section("serving"):
            raise ServesimError("sets serving.policy, which the scenario sets too; give "
                                "one of them", where=where)
        section("serving")["policy"] = "chunked" if chunked else "continuous"
    elif name == "enable_expert_parallel":
        _expert_parallel(value, given, section("hardware"), where)
    elif name == "speculative_config":
        tp = given.get("tensor_parallel_size", ("", section("hardware").get("tp")))[1]
        merge_speculative(section("serving"), speculative_keys(value, tp, where), where)
    elif name in DTYPE_FLAGS:
        _dtype_flag(name, value, section("model"), where)
    elif name in ONLY:
        if value not in ONLY[name]:
            values = ONLY[name]
            allowed = " or ".join("null" if v is None else str(v) for v in values)
            raise ServesimError(f"got {value!r}: servesim models only {allowed}"
                                + (" (vLLM's default) so far" if len(values) == 1 else ""),
                                where=where)
    elif name == "enforce_eager":
        if _switch(value, where):
            _graphs(section("serving"), "none", where)
    elif name in KERNEL or name.partition(".")[0] in KERNEL:
        graphs = graph_setting(name, value, where, given)
        if graphs is not None:
            _graphs(section("serving"), graphs, where)
        size = capture_size(name, value, where)
        if size is not None:
            _capture(section("serving"), size, where)
        if graphs in (None, "all") and value is not None and (
                size is None or not _only_capture(name, value)):
            notes.append(f"vllm.{flag}: a kernel or compilation setting, not priced: "
                         "steps cost what vLLM's default kernels take")
    elif name in HOST_TIER_FLAGS:
        host_tier_flag(name, flag, value, given, section, notes)
    elif name in CONFIG_FLAGS:
        _config_override(name, value, given, section("model"), where)
    elif "." in name:
        raise ServesimError(f"vLLM's dotted form of {name.partition('.')[0]!r} is read for "
                            "kernel settings only; give the flag whole (one JSON "
                            "mapping)", where=where)
    elif name not in NO_EFFECT:
        known = sorted([*MAPPED, "enable_chunked_prefill", "scheduling_policy", *ONLY,
                        "enforce_eager",
                        *DTYPE_FLAGS, *KERNEL, "enable_expert_parallel",
                        "speculative_config", "kv_offloading_size",
                        "kv_offloading_backend", "kv_transfer_config", *CONFIG_FLAGS])
        raise ServesimError(f"unknown or not modelled vLLM flag {name!r}; understood: "
                            f"{', '.join(known)}; each boolean one also as no-FLAG "
                            "(and flags with no effect on a simulation: "
                            "docs/scenarios.md)", where=where)


# Flags that change the model's config.json before vLLM reads it: --hf-overrides, and
# the older --rope-scaling and --rope-theta, which vLLM (to 0.10) added to the overrides.
CONFIG_FLAGS = ("hf_overrides", "rope_scaling", "rope_theta")


def _config_override(name: str, value: Any, given: dict[str, tuple[str, Any]],
                     model: dict[str, Any], where: str) -> None:
    """Add config-changing flag ``name`` to ``model.hf_overrides``: ``hf-overrides``'s
    keys, or ``rope-scaling``/``rope-theta`` as the key of that name. A key set twice
    (by two flags, or by a flag and the scenario's own ``model.hf_overrides``) is an
    error. A null value is the flag's default: no override."""
    if value is None:
        return
    if name == "hf_overrides":
        new = json_object(value, where, "config.json keys")
    else:
        new = {name: json_object(value, where, "rope_type and factor")
               if name == "rope_scaling" else value}
    mine = [flag for n, (flag, _) in given.items() if n in CONFIG_FLAGS]  # as applied
    if "hf_overrides" in model and mine[0] == given[name][0]:
        raise ServesimError("sets model.hf_overrides, which the scenario sets too; give "
                            "one of them", where=where)
    current = model.setdefault("hf_overrides", {})
    twice = [k for k in new if k in current]
    if twice:
        raise ServesimError(f"sets config key {twice[0]!r}, which another of "
                            f"{', '.join(mine)} sets too; give it once", where=where)
    current.update(new)


def _with_config_file(flags: dict[str, Any], base_dir: Path | None
                      ) -> tuple[dict[str, Any], tuple[Path, ...], frozenset[Any]]:
    """``flags`` with those of its ``config`` file (vLLM's ``--config``, a YAML mapping
    of flags) beneath them, a flag given in both keeping the section's value; the file
    read (none without one); and the flags taken from it, so errors name the file."""
    ref = next((k for k in flags if flag_name(k) == "config"), None)
    if ref is None:
        return flags, (), frozenset()
    if not isinstance(flags[ref], str) or not flags[ref].strip():
        raise ServesimError(f"got {flags[ref]!r}, expected the path of a vLLM YAML config "
                            "file", where=f"vllm.{ref}")
    path = Path(flags[ref]).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    try:
        loaded = parse_yaml(read_text(path, "vLLM config"))
    except yaml.YAMLError as exc:
        raise yaml_error(exc, str(path)) from None
    except ServesimError as exc:
        raise ServesimError(f"{str(path)!r}: {exc.message}", where=f"vllm.{ref}") from None
    if not isinstance(loaded, dict):
        raise ServesimError(f"{str(path)!r} holds {type(loaded).__name__}, expected a "
                            "mapping of vLLM flags", where=f"vllm.{ref}")
    if any(plain_name(k) == "config" for k in loaded):
        raise ServesimError(f"{str(path)!r} names a config file of its own; vLLM reads "
                            "one, so merge them", where=f"vllm.{ref}")
    own = {plain_name(k) for k in flags if k != ref}
    taken = {k: v for k, v in loaded.items() if plain_name(k) not in own}
    return {**taken, **{k: v for k, v in flags.items() if k != ref}}, (path,), frozenset(taken)


def _dtype_flag(name: str, value: Any, model: dict[str, Any], where: str) -> None:
    """A flag that sets one of the model's dtypes (:data:`DTYPE_FLAGS`). ``quantization
    fp8`` on a preset whose weights are FP8 already keeps the checkpoint's scheme (vLLM
    reads a block-scaled checkpoint's own scales)."""
    choices = DTYPE_FLAGS[name]
    if value not in choices:
        allowed = ", ".join("null" if v is None else str(v) for v in choices)
        why = UNPRICED_QUANT.get(value) if isinstance(value, str) else None
        raise ServesimError(f"got {value!r}" + (f": {why}" if why else "") +
                            f"; servesim models {allowed}", where=where)
    target = choices[value]
    if target is None:
        return
    preset = MODELS.get(str(model.get("preset")))
    if (target == ("dtype", "fp8") and preset is not None and "dtype" not in model
            and preset.dtype.startswith("fp8")):
        return
    if target[0] in model:
        raise ServesimError(f"sets model.{target[0]}, which the scenario sets too; give one "
                            "of them", where=where)
    model[target[0]] = target[1]


def _expert_parallel(value: Any, given: dict[str, tuple[str, Any]],
                     hardware: dict[str, Any], where: str) -> None:
    """``--enable-expert-parallel``: ``hardware.ep`` = tp x data-parallel size, vLLM's
    expert-parallel group (the data-parallel size itself is ``hardware.dp``, set with
    the other mapped flags)."""
    if not _switch(value, where):
        return
    dp = given.get("data_parallel_size", ("", 1))[1]
    if not isinstance(dp, int) or isinstance(dp, bool) or dp < 1:
        return  # hardware.dp's own validation names the bad value
    if "ep" in hardware:
        raise ServesimError("sets hardware.ep, which the scenario sets too; give one of "
                            "them", where=where)
    tp = given.get("tensor_parallel_size", ("", None))[1]
    tp = tp if tp is not None else hardware.get("tp", 1)
    hardware["ep"] = tp * dp if isinstance(tp, int) and not isinstance(tp, bool) else tp
