"""The SGLang and TensorRT-LLM launch settings of AIConfigurator's own collection (the
``aic`` rows of a silicon CSV, :attr:`sim.validate.siliconrows.Row.collection`).

Those rows come from AIConfigurator's gap analysis: its generator writes each server's
launch command from its rule files and a per-release command template, then the server
is benchmarked. For an aggregated SGLang server the generator's rule file
(``generator/rule_plugin/sglang.rule`` in ai-dynamo/aiconfigurator) sets
``max_prefill_tokens`` to the run's input length plus 1,500 and turns
``enable_mixed_chunk`` on; whether SGLang received the second depends on the template
of the release. The templates of SGLang 0.5.3.post2, 0.5.4.post3 and 0.5.6.post2
(``backend_templates/sglang/cli_args.<release>.j2``) pass ``--enable-mixed-chunk``;
those of 0.5.1.post1 and the generic one (every other release) test for a key spelt
``enable-mix-chunk``, which the parameter mapping never writes, so their servers ran
SGLang's default, prefill batches apart from decode batches.

With mixed chunks, SGLang's scheduler puts every running request's decode into the
prefill batch it forms when requests wait (``ForwardMode.MIXED``), and the decodes take
their one token each out of that batch's prompt budget (``PrefillAdder``'s
``mixed_with_decode_tokens``); prompts join whole while they fit what is left. That is
servesim's ``orca`` policy with ``max_prefill_tokens`` as its token budget. Without it a
closed-loop client's requests, sent together, are prefilled batch after batch before any
of them decodes, finish in the same step and come back together: every cycle starts
with the whole burst (docs/validation.md, "SGLang's mixed chunks in AIConfigurator's
runs").

The 0.5.1.post1 servers were handed ``--max-prefill-tokens`` too; the rows of that
release keep the 8,192-token prefill batches the priors were fitted with
(:data:`MIXED_TEMPLATES` only): see docs/validation.md for what was tried.

For an aggregated TensorRT-LLM server the rule file (``generator/rule_plugin/trtllm.rule``)
raises ``max_batch_size`` to 512 and sets ``max_num_tokens`` to that batch plus the input
length plus 1,500, rounded up to the 32-token KV block, so a step holds about one whole
prompt beside the decodes, not TensorRT-LLM's 8,192 tokens; the engine-args template of
1.0.0rc3 (``extra_engine_args.1.0.0rc3.yaml.j2``) gives the KV cache 0.80 of free memory
where TensorRT-LLM's default, and later templates', is 0.90.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.validate.silicon import Case

# SGLang releases whose launch template in AIConfigurator's generator passes
# --enable-mixed-chunk (cli_args.0.5.3.post2.j2, cli_args.0.5.4.post3.j2,
# cli_args.0.5.6.post2.j2).
MIXED_TEMPLATES = frozenset({"0.5.3.post2", "0.5.4.post3", "0.5.6.post2"})
# The generator's max_prefill_tokens for an aggregated server: the input length plus
# this many tokens.
PREFILL_MARGIN = 1500


# TensorRT-LLM, aggregated (generator/rule_plugin/trtllm.rule): max_batch_size raised to
# 512, or doubled from 512 clients up; max_num_tokens that batch plus the input length plus
# PREFILL_MARGIN, rounded up to a 32-token KV block; the KV cache's free-memory fraction
# the engine-args template's default where it differs from TensorRT-LLM's 0.9
# (extra_engine_args.1.0.0rc3.yaml.j2: 0.80; 1.2.0rc6.post1's and later ones': 0.90).
TRT_MIN_BATCH = 512
TRT_BLOCK = 32
TRT_FREE_FRACTION = {"1.0.0rc3": 0.80}


def aic_recipe(case: Case) -> dict[str, float]:
    """The settings of ``case``'s run (an ``aic`` row) that differ from its framework's
    defaults, in the keys of :func:`sim.validate.siliconrecipes.recipe`: for an SGLang
    release whose template passes ``--enable-mixed-chunk``, ``mixed_chunk`` (1: decodes
    ride in prefill batches) and ``max_num_batched_tokens`` (``max_prefill_tokens``,
    tokens); for TensorRT-LLM, ``max_num_seqs`` and ``max_num_batched_tokens`` as its rule
    sizes them and the template's ``free_fraction``; nothing otherwise, nor for a row of
    another collection."""
    r = case.row
    if r.collection != "aic":
        return {}
    if case.framework == "trtllm":
        batch = TRT_MIN_BATCH if r.concurrency < TRT_MIN_BATCH else 2 * r.concurrency
        tokens = -(-(batch + r.isl + PREFILL_MARGIN) // TRT_BLOCK) * TRT_BLOCK
        out = {"max_num_seqs": float(batch), "max_num_batched_tokens": float(tokens)}
        if r.version in TRT_FREE_FRACTION:
            out["free_fraction"] = TRT_FREE_FRACTION[r.version]
        return out
    if case.framework != "sglang" or r.version not in MIXED_TEMPLATES:
        return {}
    return {"mixed_chunk": 1.0, "max_num_batched_tokens": r.isl + PREFILL_MARGIN}
