"""``serving.speculative``: speculative decoding (a draft model, EAGLE or MTP heads, or
n-gram lookup), checked at load, and the arithmetic of its acceptance.

Each decode iteration of a speculating request verifies ``num_tokens + 1`` tokens (its
pending token and ``k = num_tokens`` drafted ones) and emits 1 to k+1 of them: the
drafted tokens accepted before the first rejection, plus the one the target samples at
that position. The acceptance is given one of three ways:

- ``rate``: each drafted position is accepted with probability a, independently
  (Leviathan et al., ICML 2023), so the emitted count is 1 + min(G, k) with G geometric:
  P(j + 1 tokens) = a^j·(1 − a) for j < k and a^k for k + 1, whose mean is
  (1 − a^(k+1)) / (1 − a);
- ``mean_length``: the mean emitted tokens per verify, L in [1, k + 1]; the per-position
  rate a giving that mean is solved for, and the draws follow ``rate``;
- ``distribution``: P(j drafted tokens accepted) for j = 0..k directly (k + 1 numbers
  summing to 1), e.g. as a vLLM run's per-position acceptance counts give it.

``classes`` gives a mixed workload's classes their own acceptance (code and chat draft
differently well); a class left out takes the scenario's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sim.configtools import bounded
from sim.cost.presets import MODELS
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.config.scenario import Scenario

METHODS = ("draft", "eagle", "mtp", "ngram")
# A distribution's probabilities, read from YAML, must sum to 1 within this.
SUM_TOLERANCE = 1e-6


@dataclass(frozen=True)
class AcceptanceConfig:
    """How many drafted tokens a verify keeps: exactly one of ``rate`` (per drafted
    position, 0 to 1), ``mean_length`` (mean tokens emitted per verify, 1 to k + 1) or
    ``distribution`` (probability that 0, 1, ..., k drafted tokens are accepted)."""

    rate: float | None = bounded(None, ge=0, le=1)
    mean_length: float | None = bounded(None, ge=1)
    distribution: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        given = [k for k in ("rate", "mean_length", "distribution") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ServesimError(f"give exactly one of rate, mean_length, distribution (got "
                                f"{', '.join(given) or 'none'})")
        if self.distribution is not None:
            for i, p in enumerate(self.distribution):
                if not 0 <= p <= 1:
                    raise ServesimError(f"got {p}, must be between 0 and 1",
                                        where=f"distribution[{i}]")
            total = sum(self.distribution)
            if abs(total - 1) > SUM_TOLERANCE:
                raise ServesimError(f"the probabilities sum to {total:g}, must sum to 1",
                                    where="distribution")

    def checked(self, k: int, where: str) -> AcceptanceConfig:
        """This acceptance, checked against ``k`` drafted tokens (errors at ``where``)."""
        if self.mean_length is not None and self.mean_length > k + 1:
            raise ServesimError(f"got {self.mean_length}, must be at most num_tokens + 1 = "
                                f"{k + 1} (every drafted token accepted)",
                                where=f"{where}.mean_length")
        if self.distribution is not None and len(self.distribution) != k + 1:
            raise ServesimError(f"got {len(self.distribution)} probabilities, need "
                                f"num_tokens + 1 = {k + 1} (0 to {k} drafted tokens "
                                "accepted)", where=f"{where}.distribution")
        return self

    def emit_probabilities(self, k: int) -> tuple[float, ...]:
        """P(1), ..., P(k + 1): the probability a verify of ``k`` drafted tokens emits
        that many tokens."""
        if self.distribution is not None:
            return self.distribution
        a = self.rate if self.rate is not None else rate_for_mean(self.mean_length or 1.0, k)
        return tuple([a ** j * (1 - a) for j in range(k)] + [a ** k])

    def mean_tokens(self, k: int) -> float:
        """Mean tokens a verify of ``k`` drafted tokens emits (its expectation)."""
        return sum((j + 1) * p for j, p in enumerate(self.emit_probabilities(k)))

    def describe(self) -> dict[str, object]:
        """The acceptance as given (one key)."""
        return {k: getattr(self, k) for k in ("rate", "mean_length", "distribution")
                if getattr(self, k) is not None}


def mean_for_rate(a: float, k: int) -> float:
    """Mean tokens emitted per verify at per-position acceptance ``a`` with ``k`` drafts:
    (1 − a^(k+1)) / (1 − a), and k + 1 at a = 1."""
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def rate_for_mean(mean: float, k: int) -> float:
    """The per-position rate whose mean emitted tokens with ``k`` drafts is ``mean``
    (1 to k + 1): bisection on :func:`mean_for_rate`, which rises with the rate."""
    if mean >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if mean_for_rate(mid, k) < mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding on every replica: ``method`` (``draft``: a smaller model of
    the same tokenizer, ``draft_model``, a preset; ``eagle`` / ``mtp``: prediction heads
    of ``draft_layers`` decoder layers of the target's shape; ``ngram``: prompt lookup,
    no model), ``num_tokens`` drafted per verify (k), ``acceptance`` and per-class
    ``classes`` acceptances (see the module docstring)."""

    method: Literal["draft", "eagle", "mtp", "ngram"]
    acceptance: AcceptanceConfig
    num_tokens: int = bounded(ge=1, le=64)
    draft_model: str | None = None
    draft_layers: int | None = bounded(None, ge=1)
    classes: dict[str, AcceptanceConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        k = self.num_tokens
        self.acceptance.checked(k, "acceptance")
        for name, acc in self.classes.items():
            acc.checked(k, f"classes.{name}")
        if self.method == "draft":
            if self.draft_model is None:
                raise ServesimError("method draft needs draft_model (a model preset)",
                                    where="draft_model")
            if self.draft_model not in MODELS:
                raise ServesimError(f"unknown model preset {self.draft_model!r}; valid: "
                                    f"{', '.join(sorted(MODELS))}", where="draft_model")
        elif self.draft_model is not None:
            raise ServesimError(f"draft_model is for method draft, not {self.method}",
                                where="draft_model")
        if self.draft_layers is not None and self.method not in ("eagle", "mtp"):
            raise ServesimError(f"draft_layers is for methods eagle and mtp, not "
                                f"{self.method}", where="draft_layers")

    @property
    def head_layers(self) -> int:
        """Decoder layers an EAGLE or MTP head runs per drafted token (default 1)."""
        return self.draft_layers or 1

    def describe(self) -> dict[str, object]:
        """What the summary reports of the setting."""
        k = self.num_tokens
        out: dict[str, object] = {"method": self.method, "num_tokens": k,
                                  "acceptance": self.acceptance.describe(),
                                  "expected_tokens_per_verify": self.acceptance.mean_tokens(k)}
        if self.draft_model is not None:
            out["draft_model"] = self.draft_model
        if self.method in ("eagle", "mtp"):
            out["draft_layers"] = self.head_layers
        if self.classes:
            out["classes"] = {n: {**a.describe(), "expected_tokens_per_verify": a.mean_tokens(k)}
                              for n, a in sorted(self.classes.items())}
        return out


def drafter_model(spec: SpeculativeConfig, target: ModelSpec) -> ModelSpec | None:
    """The model whose decode steps draft: the draft preset; for EAGLE and MTP the
    target's shape cut to the head's layers (its LM head shared, as both share the
    target's), attending to the whole context (a target's sliding-window layers do
    not carry into its head: gpt-oss's EAGLE-3 heads are full-attention Llama
    layers; a target's Gated DeltaNet layers do not either: Qwen3-Next's and
    Qwen3.5's MTP module is full-attention decoder layers, with the target's output
    gate and MLP or experts); None for n-gram lookup, which runs no model."""
    if spec.method == "draft":
        assert spec.draft_model is not None
        return MODELS[spec.draft_model]
    if spec.method == "ngram":
        return None
    return dataclasses.replace(target, name=f"{target.name}-{spec.method}-head",
                               layers=spec.head_layers, dense_layers=0, sliding_layers=0,
                               sliding_window=0,
                               # No Gated DeltaNet layer; ModelSpec refuses their fields
                               # set without them.
                               linear_layers=0, linear_key_heads=0, linear_value_heads=0,
                               linear_key_dim=0, linear_value_dim=0, linear_conv=0)


def draft_memory(spec: SpeculativeConfig, target: ModelSpec, tp: int) -> tuple[int, int]:
    """(weight bytes, KV bytes per token) the drafter adds on one GPU of ``tp``: a draft
    model's whole weights and KV; a head's projections plus the hidden-state fusion
    (2·hidden × hidden, as EAGLE and DeepSeek-V3's MTP module both have) and its layers'
    KV, its embedding and LM head being the target's. (0, 0) for n-gram lookup.

    An MTP drafter loads every module the checkpoint ships (``target.mtp_layers``), each
    with its own KV, though a draft step runs one: vLLM's MTP models build all of them
    and pick module ``step % modules`` a drafted token, so the price of a step
    (:func:`drafter_model`) stays one module's."""
    from sim.cost.memory import weight_bytes

    model = drafter_model(spec, target)
    if model is None:
        return 0, 0
    modules = max(1, target.mtp_layers) if spec.method == "mtp" else 1
    if modules > 1:
        model = dataclasses.replace(model, layers=model.layers * modules)
    d = shard(model, tp)
    if spec.method == "draft":
        return weight_bytes(model, tp), d.kv_bytes_per_token
    fusion = modules * 2 * model.hidden * model.hidden * model.act_bytes
    return (d.stack_bytes(model.dtype_bytes, model.expert_dtype_bytes, model.qkv_dtype_bytes)
            + fusion, d.kv_bytes_per_token)


def check_drafter(spec: SpeculativeConfig, model: ModelSpec) -> None:
    """Method ``mtp`` needs the model's checkpoint to ship MTP modules, and, where it
    drafts more tokens than the modules, a multiple of their count (vLLM refuses other
    counts, as it cycles through the modules one a drafted token); a draft model with
    Gated DeltaNet layers is refused (its own recurrent states are not modelled).
    Errors at ``serving.speculative``."""
    where = "serving.speculative"
    n, k = model.mtp_layers, spec.num_tokens
    if spec.method == "mtp" and n == 0:
        with_mtp = ", ".join(sorted(name for name, m in MODELS.items() if m.mtp_layers))
        raise ServesimError(f"got method mtp, but {model.name} has no multi-token-prediction "
                            "module a server drafts with (model.mtp_layers 0; a config.json "
                            "gives them as num_nextn_predict_layers or mtp_num_hidden_layers); "
                            f"use eagle, draft or ngram, or a model with them ({with_mtp})",
                            where=f"{where}.method")
    if spec.method == "mtp" and k > n and k % n:
        raise ServesimError(f"got {k} with {n} MTP modules in {model.name}: more tokens than "
                            f"modules must be a multiple of {n} (vLLM runs the modules in "
                            f"turn and refuses other counts); give 1 to {n} or a multiple "
                            f"of {n}", where=f"{where}.num_tokens")
    draft = drafter_model(spec, model) if spec.method == "draft" else None
    if draft is not None and draft.linear_layers:
        raise ServesimError(f"draft model {draft.name} has {draft.linear_layers} "
                            "linear-attention (Gated DeltaNet) layers, whose per-sequence "
                            "states a draft model keeps are not modelled; choose a draft "
                            "model without them, or method mtp", where=f"{where}.draft_model")


def check_speculative(scenario: Scenario) -> None:
    """Load-time checks that need the model and hardware: a draft model shares the
    target's vocabulary and splits over the same tp; an EAGLE or MTP head has at most
    the target's layers; every class named has requests of
    that name (when the workload names its classes); errors at ``serving.speculative``."""
    spec = scenario.serving.speculative
    if spec is None:
        return
    where = "serving.speculative"
    model = scenario.model
    if spec.method == "draft":
        draft = drafter_model(spec, model)
        assert draft is not None
        if draft.vocab != model.vocab:
            raise ServesimError(f"draft model {draft.name} has vocab {draft.vocab}, the target "
                                f"{model.name} {model.vocab}: a draft model must share the "
                                "target's tokenizer", where=f"{where}.draft_model")
        shard(draft, scenario.hardware.tp, where=f"{where}.draft_model")
    check_drafter(spec, model)
    if spec.draft_layers is not None and spec.draft_layers > model.layers:
        # A head deeper than the model it drafts for is a slip; its weights would be
        # blamed on the hardware by the memory check otherwise.
        raise ServesimError(f"got {spec.draft_layers}, more than the {model.layers} layers "
                            f"of the target {model.name}: an EAGLE or MTP head has 1 to a "
                            f"few decoder layers; give 1 to {model.layers}",
                            where=f"{where}.draft_layers")
    names = scenario.workload.classes
    if spec.classes and names is None and scenario.workload.trace is None:
        # Generated requests without workload.classes have no class: these acceptances
        # would never apply. (A trace's class column names its own; checked as it loads.)
        raise ServesimError(f"names classes ({', '.join(sorted(spec.classes))}) but the "
                            "workload has none: give workload.classes, or a trace with a "
                            "class column", where=f"{where}.classes")
    if spec.classes and names is not None:
        for name in spec.classes:
            if name not in names:
                raise ServesimError(f"no workload class {name!r}; classes: "
                                    f"{', '.join(sorted(names))}", where=f"{where}.classes")
