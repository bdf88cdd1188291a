"""``servesim profile``: build cost profiles from public kernel tables, list and ship them.

- ``build``: one profile (``--gpu``, ``--framework``, ``--model`` or ``--hf-config``,
  ``--tp``) from NVIDIA AIConfigurator's tables (the ``measured`` extra).
- ``list``: the shipped profiles, and what the installed tables cover.
- ``ship``: rebuild every shipped profile from the installed tables (``--check``
  compares instead of writing) — the one command that regenerates
  ``sim/data/profiles``.
- ``fit-roofline``: the roofline's efficiencies and kernel floor, fitted on the tables
  with each GPU left out in turn (:mod:`sim.cost.tables.rooflinefit`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any, get_args

import yaml

from sim.cliargs import ArgParser, int_arg
from sim.cost.dtypes import Dtype, ExpertDtype, KVDtype
from sim.cost.gpus import GPUS
from sim.cost.measured import (
    SHIPPED_DP,
    SHIPPED_DSA,
    SHIPPED_EP,
    SHIPPED_FP4,
    SHIPPED_FP8,
    SHIPPED_FRAMEWORKS,
    SHIPPED_GPTOSS,
    SHIPPED_GPTOSS_GPUS,
    SHIPPED_HYBRID,
    SHIPPED_MLA,
    SHIPPED_MODELS,
    SHIPPED_MOE,
    SHIPPED_TPS,
    shipped,
)
from sim.cost.memory import kv_capacity_blocks
from sim.cost.presets import MODELS, model_preset
from sim.cost.profilefile import PROFILE_DIR, parse_profile, profile_kind
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.cost.tables.moetable import MOE_BACKENDS, ROUTINGS
from sim.cost.tables.profilebuild import BuildSpec, build_profile, profile_name, resolve_version
from sim.errors import ServesimError
from sim.files import check_name_length, check_replaceable_file

HEADER = ("# servesim cost profile, built by `servesim profile build` from NVIDIA "
          "AIConfigurator's\n# measured kernel tables (Apache-2.0; see NOTICE)\n")


def profile_text(data: dict[str, Any]) -> str:
    """The YAML text of a built profile (deterministic: same tables, same bytes)."""
    return HEADER + yaml.safe_dump(data, sort_keys=False, width=100, default_flow_style=None)


def _model(args: argparse.Namespace) -> ModelSpec:
    if args.hf_config is not None and args.model is not None:
        raise ServesimError(f"got --model {args.model} and --hf-config {args.hf_config}; "
                            "give one (the model's dimensions come from either)",
                            where="--model")
    if args.hf_config is not None:
        from sim.cost.hfconfig import from_hf_config

        return from_hf_config(args.hf_config)
    if args.model is None:
        raise ServesimError("give --model PRESET or --hf-config FILE")
    try:
        return model_preset(args.model)
    except ServesimError as exc:
        raise ServesimError(exc.message, where=exc.where or "--model") from None


def _check_out(out: Path, hf_config: Path | None) -> None:
    """Refuse, before building, an ``--out`` that is not a YAML file's name, is a folder,
    or is the ``--hf-config`` being read (the build had replaced it with the profile)."""
    if out.suffix not in (".yaml", ".yml"):
        raise ServesimError(f"got {out}, expected a .yaml or .yml file name (a profile is "
                            "YAML)", where="--out")
    check_name_length(out, "--out")
    if out.is_dir():
        raise ServesimError(f"got {out}, a folder; expected the profile's file name",
                            where="--out")
    if not out.parent.is_dir():
        # A mistyped folder would otherwise be created, the profile left where nobody looks.
        raise ServesimError(f"got {out}, in {out.parent}, which is not a folder; create it "
                            "first", where="--out")
    if hf_config is not None and out.exists() and hf_config.exists() and \
            out.resolve() == hf_config.resolve():
        raise ServesimError(f"got {out}, the --hf-config being read: the profile would "
                            "replace it", where="--out")
    check_replaceable_file(out, lambda p: profile_kind(p) == "measured-kernels",
                           "a profile servesim profile build wrote")


def with_dtypes(model: ModelSpec, dtype: str | None, kv_dtype: str | None,
                expert_dtype: str | None = None, qkv_dtype: str | None = None) -> ModelSpec:
    """``model`` with its weight, KV-cache, experts' and query/key/value projections'
    dtypes replaced where given; a value the model description does not know, or
    experts' dtype for a dense model, is an error naming the flag and the valid ones."""
    if expert_dtype is not None and not model.experts:
        raise ServesimError(f"got {expert_dtype!r}, but {model.name} has no experts; set "
                            "--dtype for a dense model's projections", where="--expert-dtype")
    changes: dict[str, str] = {}
    for key, value, valid in (("dtype", dtype, get_args(Dtype)),
                              ("kv_dtype", kv_dtype, get_args(KVDtype)),
                              ("expert_dtype", expert_dtype,
                               tuple(d for d in get_args(ExpertDtype) if d)),
                              ("qkv_dtype", qkv_dtype,
                               tuple(d for d in get_args(ExpertDtype) if d))):
        if value is None:
            continue
        if value not in valid:
            raise ServesimError(f"got {value!r}; valid: {', '.join(valid)}",
                                where=f"--{key.replace('_', '-')}")
        changes[key] = value
    return dataclasses.replace(model, **changes)  # type: ignore[arg-type]


def _build(argv: list[str]) -> int:
    p = ArgParser(prog="servesim profile build",
                                description="Build a cost profile from public kernel tables.")
    p.add_argument("--from", dest="source", choices=["aiconfigurator"], default="aiconfigurator",
                   help="the tables to build from (NVIDIA AIConfigurator's, the default)")
    p.add_argument("--gpu", required=True, help="GPU (servesim name, e.g. h100-sxm)")
    p.add_argument("--framework", default="vllm", help="vllm, sglang or trtllm")
    p.add_argument("--version", default=None, help="table version (default: the newest)")
    p.add_argument("--model", default=None, help="a model preset")
    p.add_argument("--hf-config", type=Path, default=None, help="a HuggingFace config.json")
    p.add_argument("--tp", type=int_arg(ge=1, le=1024), default=1, help="tensor-parallel degree")
    p.add_argument("--ep", type=int_arg(ge=1, le=1024), default=1,
                   help="expert parallelism (vLLM's --enable-expert-parallel): 1, or tp "
                        "(dp x tp with --dp)")
    p.add_argument("--dp", type=int_arg(ge=1, le=1024), default=1,
                   help="data-parallel attention ranks sharing a mixture of experts' experts "
                        "(vLLM's --data-parallel-size with --enable-expert-parallel): the "
                        "profile is one rank's, with the experts over every rank's tokens "
                        "apart; needs --ep dp x tp")
    p.add_argument("--dtype", default=None,
                   help="the projections' weight dtype: bf16, fp8 (per-tensor scales), "
                        "fp8-block (128x128 block scales) or nvfp4 (FP4 tensor cores only); "
                        "default: the model's")
    p.add_argument("--expert-dtype", default=None,
                   help="a mixture of experts' routed and shared experts' weight dtype, "
                        "when its checkpoint quantises them apart from the other projections "
                        "(e.g. nvfp4 experts beside bf16 attention); default: the model's")
    p.add_argument("--qkv-dtype", default=None,
                   help="the attention layers' query/key/value projections' weight dtype "
                        "(with latent attention q_a, q_b, kv_a and kv_b), when the "
                        "checkpoint keeps them apart from the other projections (NVIDIA's "
                        "NVFP4 DeepSeek checkpoints: bf16); default: the model's")
    p.add_argument("--kv-dtype", default=None,
                   help="KV-cache dtype: auto (the activations', bf16) or fp8; default: "
                        "the model's")
    p.add_argument("--routing", default="auto", choices=ROUTINGS,
                   help="a mixture of experts' routing: which of the MoE tables' rows to "
                        "read (auto: the power law the tables' publisher gives the model's "
                        "family; balanced: every expert an equal share)")
    p.add_argument("--moe-backend", default="auto", choices=MOE_BACKENDS,
                   help="a mixture of experts' kernel (auto: the one the tables measured "
                        "most; triton: the Triton fused-MoE kernel, as vLLM's --moe-backend "
                        "triton runs it, from an older version's tables if need be; mxfp8: "
                        "mxfp4 experts with MXFP8 activations, as "
                        "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 runs them, from SGLang's "
                        "tables where the framework's lack them; trtllm-gen: FlashInfer's "
                        "TensorRT-LLM MoE kernel, as TensorRT-LLM's moe_config.backend "
                        "TRTLLM runs it, from SGLang's tables likewise)")
    p.add_argument("--out", type=Path, required=True, help="profile YAML to write")
    a = p.parse_args(argv)
    if a.tp < 1:
        raise ServesimError(f"got {a.tp}, must be at least 1", where="--tp")
    _check_out(a.out, a.hf_config)
    model = with_dtypes(_model(a), a.dtype, a.kv_dtype, a.expert_dtype, a.qkv_dtype)
    for flag, value in (("--routing", a.routing), ("--moe-backend", a.moe_backend)):
        if value != "auto" and not model.experts:
            # A dense model has no MoE layer for the choice to act on: say so, not ignore it.
            raise ServesimError(f"got {value!r}, but {model.name} has no experts; it applies "
                                "to mixtures of experts only", where=flag)
    spec = BuildSpec(model, a.gpu, a.framework, a.tp, a.version, a.ep, a.routing,
                     a.moe_backend, a.dp)
    start = time.perf_counter()
    text = profile_text(build_profile(spec))
    try:
        a.out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ServesimError(f"cannot write: {exc.strerror}", str(a.out)) from None
    prof = parse_profile(yaml.safe_load(text), str(a.out))
    print(f"wrote {a.out} ({prof.source}; {time.perf_counter() - start:.1f} s)")
    return 0


def shipped_specs() -> list[BuildSpec]:
    """Every profile ``ship`` builds: each shipped model on each GPU the tables cover,
    at each tp that splits its heads and leaves room for KV cache at 0.9 of memory; and
    gpt-oss at its listed tps on its listed GPUs (:data:`SHIPPED_GPTOSS`)."""
    from sim.cost.tables.kerneltables import GPU_DIRS, HELD_OUT_DIRS

    out: list[BuildSpec] = []
    models = [MODELS[name] for name in SHIPPED_MODELS]
    # FP8 weights where the tables time FP8 GEMMs (every GPU but the A100).
    models += [dataclasses.replace(MODELS[name], dtype="fp8") for name in SHIPPED_FP8]
    # NVFP4 weights where the GPU has FP4 tensor cores (B200 and B300 of the shipped GPUs).
    models += [dataclasses.replace(MODELS[name], dtype="nvfp4") for name in SHIPPED_FP4]
    models += [MODELS[name] for name in SHIPPED_MOE + SHIPPED_MLA + SHIPPED_HYBRID + SHIPPED_DSA]
    for model in models:
        for gpu in [*GPU_DIRS, *HELD_OUT_DIRS]:
            if model.dtype != "bf16" and not GPUS[gpu].fp8_flops:
                continue
            if model.dtype == "nvfp4" and not GPUS[gpu].fp4_flops:
                continue
            for tp in SHIPPED_TPS:
                try:
                    shard(model, tp)  # the heads and MLP split over tp ...
                    kv_capacity_blocks(model, GPUS[gpu], tp, 0.9, 16)  # ... and it fits
                except ServesimError:
                    continue
                out.extend(BuildSpec(model, gpu, fw, tp) for fw in SHIPPED_FRAMEWORKS
                           if _gemms_measured(model, gpu, fw, tp)
                           and (not model.experts or _moe_measured(model, gpu, fw, tp))
                           and _attention_measured(model, gpu, fw, tp)
                           and (not model.linear_layers or _gdn_measured(model, gpu, fw, tp)))
    out.extend(BuildSpec(MODELS[name], gpu, "vllm", tp, ep=tp) for name, gpu, tp in SHIPPED_EP)
    out.extend(BuildSpec(MODELS[name], gpu, "vllm", 1, ep=dp, dp=dp)
               for name, gpu, dp in SHIPPED_DP)
    for name, tps in SHIPPED_GPTOSS.items():
        out.extend(BuildSpec(MODELS[name], gpu, fw, tp) for gpu in SHIPPED_GPTOSS_GPUS
                   for tp in tps for fw in SHIPPED_FRAMEWORKS
                   if _fits(MODELS[name], gpu, tp) and _moe_measured(MODELS[name], gpu, fw, tp))
    return out


def _fits(model: ModelSpec, gpu: str, tp: int) -> bool:
    """Whether ``model`` splits over ``tp`` GPUs of ``gpu`` and leaves room for KV cache."""
    try:
        shard(model, tp)
        kv_capacity_blocks(model, GPUS[gpu], tp, 0.9, 16)
    except ServesimError:
        return False
    return True


def _gemms_measured(model: ModelSpec, gpu: str, framework: str, tp: int) -> bool:
    """Whether the installed GEMM tables time ``model``'s projections (its weight dtype)
    on ``gpu`` for ``framework``, its own rows or a donor's (RTX PRO 6000's time no
    block-scaled FP8 under SGLang)."""
    from sim.cost.tables.gemmtable import projection_gemms

    try:
        projection_gemms(gpu, framework, resolve_version(BuildSpec(model, gpu, framework, tp)),
                         model.dtype)
    except ServesimError:
        return False
    return True


def _gdn_measured(model: ModelSpec, gpu: str, framework: str, tp: int) -> bool:
    """Whether the installed linear-attention tables time ``model``'s Gated DeltaNet
    layer on ``gpu`` at ``tp`` (its heads on one GPU) for ``framework``."""
    from sim.cost.tables.gdntable import gdn_times

    try:
        version = resolve_version(BuildSpec(model, gpu, framework, tp))
        gdn_times(gpu, framework, version, model, shard(model, tp))
    except ServesimError:
        return False
    return True


def _attention_measured(model: ModelSpec, gpu: str, framework: str, tp: int) -> bool:
    """Whether the installed tables hold the attention rows ``model`` needs beyond the
    ordinary ones, on ``gpu`` at the version its ``framework`` profile is built from: a
    sparse model's module rows of its architecture, a latent-attention model's MLA rows."""
    from sim.cost.tables.dsaattn import has_rows
    from sim.cost.tables.kerneltables import versions

    if not model.mla:
        return True
    version = resolve_version(BuildSpec(model, gpu, framework, tp))
    if model.sparse:
        return has_rows(gpu, framework, version, model)
    return version in versions(gpu, "mla", framework)


def _moe_measured(model: ModelSpec, gpu: str, framework: str, tp: int) -> bool:
    """Whether the installed MoE tables time ``model``'s experts on ``gpu`` at ``tp``."""
    from sim.cost.tables.moetable import moe_times

    try:
        moe_times(gpu, framework, resolve_version(BuildSpec(model, gpu, framework, tp)), model,
                  tp)
    except ServesimError:
        return False
    return True


def _ship(argv: list[str]) -> int:
    p = ArgParser(prog="servesim profile ship",
                                description="Rebuild every shipped measured profile from the "
                                            "installed public kernel tables.")
    p.add_argument("--out", type=Path, default=PROFILE_DIR, help="folder (default: the "
                                                                  "package's own)")
    p.add_argument("--check", action="store_true",
                   help="compare with the files there instead of writing; status 1 on a "
                        "difference")
    a = p.parse_args(argv)
    # The folder first: a bad one is one line now, not after minutes of building.
    if a.check and not a.out.is_dir():
        raise ServesimError("is not a folder of profiles to check" if a.out.exists()
                            else "does not exist", where=f"--out {a.out}")
    if not a.check:
        try:
            a.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ServesimError(f"cannot make the folder: {exc.strerror}",
                                where=f"--out {a.out}") from None
    specs = shipped_specs()
    paths = [a.out / f"{profile_name(spec)}.yaml" for spec in specs]
    missing = [p.name for p in paths if not p.is_file()]
    if a.check and len(missing) == len(paths):
        # Found before the minutes a rebuild of every profile takes.
        raise ServesimError(f"holds none of the {len(paths)} shipped profiles (e.g. "
                            f"{missing[0]}): not a folder of shipped profiles",
                            where=f"--out {a.out}")
    differ = []
    for spec, path in zip(specs, paths, strict=True):
        if a.check and path.name in missing:
            differ.append(f"{path.name} (missing)")
            continue
        text = profile_text(build_profile(spec))
        if a.check:
            if path.read_text(encoding="utf-8") != text:
                differ.append(path.name)
        else:
            try:
                path.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise ServesimError(f"cannot write {path.name}: {exc.strerror}",
                                    where=f"--out {a.out}") from None
    if a.check:
        print(f"{len(specs) - len(differ)} of {len(specs)} shipped profiles equal a rebuild"
              + (f"; differ: {', '.join(differ)}" if differ else ""))
        return 1 if differ else 0
    print(f"wrote {len(specs)} profiles to {a.out}")
    return 0


def _list(argv: list[str]) -> int:
    p = ArgParser(prog="servesim profile list",
                                description="List shipped profiles and the installed tables.")
    p.parse_args(argv)
    rows = shipped()
    print(f"{len(rows)} shipped measured profiles (cost: measured):")
    by: dict[tuple[str, str], list[str]] = {}
    for s in rows:
        quant = f" {s.dtype}" if s.dtype else ""
        kv = " fp8-kv" if s.kv_dtype == "fp8" else ""
        # The layout as hardware.tp / ep / dp select it: dp8 ep8 is not tp1.
        layout = f"tp{s.tp}" + (f" ep{s.ep}" if s.ep > 1 else "") \
            + (f" dp{s.dp}" if s.dp > 1 else "")
        by.setdefault((s.model, s.gpu), []).append(f"{layout} {s.framework}{quant}{kv}")
    for (model, gpu), what in sorted(by.items()):
        print(f"  {model:<15} {gpu:<10} {', '.join(what)}")
    try:
        from sim.cost.tables.kerneltables import describe_coverage, wheel_version

        print(f"installed tables (aiconfigurator-core {wheel_version()}): {describe_coverage()}")
    except ServesimError as exc:
        print(f"installed tables: none ({exc})")
    return 0


def _fit_roofline(argv: list[str]) -> int:
    from sim.cost.tables.rooflinefit import main as fit_main

    return fit_main(argv)


VERBS = {"build": _build, "ship": _ship, "list": _list, "fit-roofline": _fit_roofline}


def main(argv: list[str]) -> int:
    """Entry point of ``servesim profile``."""
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: servesim profile {build,list,ship,fit-roofline} [ARGS]\n\n"
              + (__doc__ or ""))
        return 0 if argv else 2
    verb = VERBS.get(argv[0])
    if verb is None:
        raise ServesimError(f"unknown verb {argv[0]!r}; valid: {', '.join(VERBS)}")
    return verb(argv[1:])
