"""A vLLM server's flags pasted into a scenario (the ``vllm`` section): each lands on the
key it means, what they leave unset takes ``vllm serve``'s V1 default, and what servesim
does not model is refused by name."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sim.config.scenario import from_dict
from sim.config.vllmdefaults import batch_defaults
from sim.core.engine import simulate
from sim.errors import ServesimError

WORKLOAD = {"arrivals": {"process": "constant", "rate": 2.0},
            "lengths": {"prompt": {"dist": "fixed", "value": 64},
                        "output": {"dist": "fixed", "value": 8}},
            "num_requests": 6}


def scenario(vllm: Any, **more: Any):
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
           "workload": WORKLOAD, "vllm": vllm, **more}
    return from_dict(raw, "<test>")


def test_pasted_flags_land_on_their_keys() -> None:
    sc = scenario({"model": "org/tiny-instruct", "port": 8000, "max-model-len": 1024,
                   "--gpu-memory-utilization": 0.8, "max_num_seqs": 64,
                   "max-num-batched-tokens": 4096, "block-size": 32,
                   "tensor-parallel-size": 2, "data-parallel-size": 3,
                   "num-gpu-blocks-override": 500, "swap-space": 8,
                   "scheduling-policy": "priority"})
    assert sc.model.max_context == 1024
    assert (sc.hardware.memory_utilization, sc.hardware.tp) == (0.8, 2)
    assert sc.cluster.replicas == 3
    sv = sc.serving
    assert (sv.max_num_seqs, sv.max_num_batched_tokens, sv.block_size) == (64, 4096, 32)
    assert (sv.num_gpu_blocks, sv.swap_space_gib, sv.priority) == (500, 8, True)
    # V1: chunked prefill whose per-iteration budget is max_num_batched_tokens; no watermark.
    assert (sv.policy, sv.chunk_budget, sv.watermark) == ("chunked", 4096, 0.0)


@pytest.mark.parametrize("gpu, tokens, seqs", [
    ("h100-sxm", 8192, 1024), ("h200", 8192, 1024),
    ("a100-80gb", 2048, 256),  # vLLM keeps A100s on the small defaults (its PR #17885)
    ("l40s", 2048, 256),       # under 70 GiB
])
def test_unset_batch_limits_take_vllm_serve_defaults(gpu: str, tokens: int, seqs: int) -> None:
    assert batch_defaults(gpu) == (tokens, seqs)
    sv = scenario({}, hardware={"gpu": gpu}).serving
    assert (sv.max_num_batched_tokens, sv.max_num_seqs, sv.chunk_budget) == (tokens, seqs,
                                                                            tokens)


def test_negated_boolean_flags_as_vllm_config_files_write_them() -> None:
    # InferenceX's config.yaml for gpt-oss on H200, the flags servesim prices.
    sc = scenario({"no-enable-prefix-caching": True, "max-num-batched-tokens": 8192,
                   "no-enforce-eager": True, "no-disable-log-requests": False})
    assert (sc.serving.prefix_caching, sc.serving.max_num_batched_tokens) == (False, 8192)
    on = scenario({"no-async-scheduling": False}, cost={"roofline": {}})
    assert on.serving.async_scheduling is True
    off = scenario({"no-async-scheduling": True, "no-enable-chunked-prefill": True})
    assert (off.serving.async_scheduling, off.serving.policy) == (False, "continuous")
    gated = scenario({"no-scheduler-reserve-full-isl": True})
    assert gated.serving.scheduler_reserve_full_isl is False
    assert not gated.serving.reserves_full_isl and scenario({}).serving.reserves_full_isl
    with pytest.raises(ServesimError, match=r"vllm.no-async-scheduling: given twice \(as "
                                            r"'async-scheduling' and 'no-async-scheduling'\)"):
        scenario({"async-scheduling": True, "no-async-scheduling": False})
    with pytest.raises(ServesimError, match=r"vllm.no-max-model-len: unknown or not modelled"):
        scenario({"no-max-model-len": True})


def test_chunked_prefill_off_is_vllm_v0_continuous_batching() -> None:
    sv = scenario({"enable-chunked-prefill": False, "preemption-mode": "swap"}).serving
    assert (sv.policy, sv.preemption) == ("continuous", "swap")


def test_the_scenario_keeps_what_the_flags_leave_to_it() -> None:
    sv = scenario({"max-num-seqs": 32}, serving={"policy": "orca", "watermark": 0.05}).serving
    assert (sv.policy, sv.watermark, sv.max_num_seqs) == ("orca", 0.05, 32)


@pytest.mark.parametrize("budget, ttft", [(128, 0.010 + 0.064), (32, 2 * (0.010 + 0.032))])
def test_a_pasted_flag_set_runs_with_its_token_budget(budget: int, ttft: float) -> None:
    # Requests 0.5 s apart never overlap. A 64-token prompt prefills in one iteration of
    # 10 ms + 64 x 1 ms under a 128-token budget; under 32 it is chunked in two.
    res = simulate(scenario({"max-model-len": 512, "max-num-batched-tokens": budget,
                             "max-num-seqs": 4, "enable-prefix-caching": False}))
    assert (res.first_token - res.requests.arrival_s).tolist() == pytest.approx([ttft] * 6)


@pytest.mark.parametrize("vllm, more, where, message", [
    ({"max-num-seqs": 8}, {"serving": {"max_num_seqs": 16}}, "vllm.max-num-seqs",
     "sets serving.max_num_seqs, which the scenario sets too"),
    ({"gpu_memory_utilization": 0.8}, {"hardware": {"gpu_memory_utilization": 0.7}},
     "vllm.gpu_memory_utilization", "sets hardware.gpu_memory_utilization"),
    ({"max-model-len": 8, "max_model_len": 9}, {}, "vllm.max_model_len", "given twice"),
    ({"kv-cache-dtype": "int8"}, {}, "vllm.kv-cache-dtype", "servesim models auto, fp8"),
    ({"pipeline-parallel-size": 2}, {"hardware": {"pp": 2}}, "vllm.pipeline-parallel-size",
     "sets hardware.pp, which the scenario sets too"),
    ({"quantization": "bitsandbytes"}, {}, "vllm.quantization",
     "dequantised to 16 bits for every GEMM, a kernel no public table times, and users "
     "report it slower than the 16-bit model; servesim models null, fp8, awq, awq_marlin, "
     "gptq, gptq_marlin, modelopt_fp4"),
    ({"quantization": "gguf"}, {}, "vllm.quantization",
     "got 'gguf'; servesim models null, fp8"),
    ({"speculative-config": "{}"}, {}, "vllm.speculative-config", "needs method"),
    ({"speculative-config": "{method: eagle}"}, {}, "vllm.speculative-config",
     "not a JSON object"),
    # json keeps the last of two keys; it had run ngram where eagle3 was written first.
    ({"speculative-config": '{"method": "eagle3", "num_speculative_tokens": 3, '
                            '"method": "ngram"}'}, {}, "vllm.speculative-config",
     "key 'method' given twice"),
    ({"speculative-config": {"method": "medusa", "num_speculative_tokens": 2}}, {},
     "vllm.speculative-config.method", "servesim models eagle, eagle3, ngram"),
    ({"speculative-config": {"method": "eagle", "num_speculative_tokens": 2}}, {},
     "vllm.speculative-config", "give serving.speculative.acceptance"),
    ({"speculative-config": {"method": "eagle3", "num_speculative_tokens": 2}},
     {"serving": {"speculative": {"method": "eagle", "acceptance": {"rate": 0.5}}}},
     "vllm.speculative-config", "sets serving.speculative.method, which the scenario sets"),
    ({"speculative-config": {"method": "ngram", "num_speculative_tokens": 2,
                             "disable_by_batch_size": 8}},
     {"serving": {"speculative": {"acceptance": {"rate": 0.5}}}},
     "vllm.speculative-config.disable_by_batch_size", "models only null"),
    ({"speculative-config": {"method": "eagle", "num_speculative_tokens": 2,
                             "draft_tensor_parallel_size": 1, "tensor_parallel": 2}},
     {"serving": {"speculative": {"acceptance": {"rate": 0.5}}}},
     "vllm.speculative-config.tensor_parallel", "unknown or not modelled key"),
    ({"tensor-parallel-size": 2,
      "speculative-config": {"method": "eagle", "num_speculative_tokens": 2,
                             "draft_tensor_parallel_size": 1}},
     {"serving": {"speculative": {"acceptance": {"rate": 0.5}}}},
     "vllm.speculative-config.draft_tensor_parallel_size", "target's 2 GPU(s)"),
    ({"speculative-config": {"method": "draft_model", "num_speculative_tokens": 2}},
     {"serving": {"speculative": {"acceptance": {"rate": 0.5}}}},
     "vllm.speculative-config", "serving.speculative.draft_model"),
    ({"stream-interval": 20}, {"serving": {"stream_interval": 5}}, "vllm.stream-interval",
     "sets serving.stream_interval, which the scenario sets"),
    ({"api-server-count": 4}, {}, "vllm.api-server-count", "servesim models only 1"),
    ({"disable-hybrid-kv-cache-manager": True},
     {"serving": {"disable_hybrid_kv_cache_manager": False}},
     "vllm.disable-hybrid-kv-cache-manager",
     "sets serving.disable_hybrid_kv_cache_manager, which the scenario sets"),
    ({"hf-overrides": '{"rope_scaling": {"factor": 4}}'}, {}, "model.hf_overrides.rope_scaling",
     "expected a mapping that names its rope_type"),
    ({"hf-overrides": '{"num_hidden_layers": 2}'}, {}, "model.hf_overrides.num_hidden_layers",
     "give the changed config.json as model.hf_config"),
    ({"hf-overrides": '["rope_scaling"]'}, {}, "vllm.hf-overrides", "expected a mapping"),
    ({"hf-overrides": {"rope_theta": 5e5}},
     {"model": {"preset": "tiny", "hf_overrides": {"rope_theta": 1e6}}}, "vllm.hf-overrides",
     "sets model.hf_overrides, which the scenario sets too"),
    ({"speculative_config.method": "eagle"}, {}, "vllm.speculative_config.method",
     "dotted form of 'speculative_config' is read for kernel settings only"),
    ({"max-model-len": "2.5K"}, {}, "vllm.max-model-len", "a binary suffix (K) takes a whole"),
    ({"kv-offloading-size": 0}, {}, "vllm.kv-offloading-size", "expected GiB"),
    ({"kv-offloading-size": 10**400}, {}, "vllm.kv-offloading-size", "a finite number"),
    ({"kv-transfer-config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                             "kv_connector_extra_config": {"cpu_bytes_to_use": 10**400}}},
     {}, "vllm.kv-transfer-config.kv_connector_extra_config.cpu_bytes_to_use",
     "a finite number"),
    ({"kv-transfer-config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                             "kv_connector_extra_config": {"cpu_bytes_to_use": 8e9,
                                                           "eviction_policy": "fifo"}}},
     {}, "vllm.kv-transfer-config.kv_connector_extra_config.eviction_policy", "lru or arc"),
    ({"kv-offloading-backend": "disk"}, {}, "vllm.kv-offloading-backend",
     "vLLM's backends are native, lmcache"),
    ({"kv-offloading-size": 8}, {"serving": {"kv_offload": {"cpu_gb": 4}}},
     "vllm.kv-offloading-size", "sets serving.kv_offload, which the scenario sets too"),
    ({"config": "missing.yaml"}, {}, "vllm.config", "missing.yaml"),
    ({"config": None}, {}, "vllm.config", "got None, expected the path of a vLLM YAML config"),
    ({"max-model-len": "\u00b2"}, {}, "vllm.max-model-len", "expected an integer, optionally"),
    ({"kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"}}, {},
     "vllm.kv-transfer-config.kv_connector", "describe the pair as serving.policy: "
     "disaggregated with its disaggregated: section"),
    ({"kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}},
     {"serving": {"policy": "disaggregated"}}, "vllm.kv-transfer-config.kv_role",
     "the flags stand for both pools' servers, and NixlConnector runs them with kv_role "
     "kv_both"),
    ({"kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both",
                             "kv_connector_module_path": "my.mod"}},
     {"serving": {"policy": "disaggregated"}},
     "vllm.kv-transfer-config.kv_connector_module_path", "unknown or not modelled key"),
    ({"kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both",
                             "kv_connector_extra_config": [1]}},
     {"serving": {"policy": "disaggregated"}},
     "vllm.kv-transfer-config.kv_connector_extra_config", "expected a mapping"),
    ({"kv-transfer-config": {"kv_connector": "P2pNcclConnector", "kv_role": "kv_producer"}},
     {"serving": {"policy": "disaggregated"}}, "vllm.kv-transfer-config.kv_connector",
     "NixlConnector as the transfer of serving.policy: disaggregated"),
    ({"kv-transfer-config": '{"kv_connector": "LMCacheConnectorV1", "kv_role": '
                            '"kv_producer"}'}, {},
     "vllm.kv-transfer-config.kv_role", "a producer or consumer role"),
    ({"kv-transfer-config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                             "kv_connector_extra_config": {"num_cpu_blocks": 1000}}}, {},
     "vllm.kv-transfer-config.kv_connector_extra_config", "num_cpu_blocks, an older "
     "release's size"),
    ({"kv-transfer-config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                             "kv_connector_extra_config": {"cpu_bytes_to_use": 8e9,
                                                           "spec_name": "TieringOffloadingSpec"}}},
     {}, "vllm.kv-transfer-config.kv_connector_extra_config.spec_name", "not tiers below it"),
    ({"kv-transfer-config": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
                             "kv_connector_extra_config": {"lmcache.local_disk": "/nvme"}}},
     {}, "vllm.kv-transfer-config.kv_connector_extra_config.lmcache.local_disk",
     "a tier below host memory is not modelled"),
    ({"kv-transfer-config": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
                             "kv_connector_extra_config": {"lmcache.save_decode_cache": 1}}},
     {}, "vllm.kv-transfer-config.kv_connector_extra_config.lmcache.save_decode_cache",
     "expected true or false"),
    ({"kv-transfer-config": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
                             "kv_connector_module_path": "my.mod"}}, {},
     "vllm.kv-transfer-config.kv_connector_module_path", "unknown or not modelled key"),
    ({"kv-transfer-config": '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"',
      }, {}, "vllm.kv-transfer-config", "not a JSON object"),
    ({"kv-transfer-config": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
      "kv-offloading-size": 8}, {}, "vllm.kv-transfer-config", "give one of them"),
    ({"kv-transfer-config": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}},
     {"serving": {"kv_offload": {"cpu_gb": 4}}}, "vllm.kv-transfer-config",
     "sets serving.kv_offload, which the scenario sets too"),
    ({"scheduling-policy": "lifo"}, {}, "vllm.scheduling-policy", "fcfs and priority"),
    ({"enable-chunked-prefill": True}, {"serving": {"policy": "static"}},
     "vllm.enable-chunked-prefill", "sets serving.policy"),
    ("--max-model-len 8", {}, "vllm", "expected a mapping"),
    ({"---max-num-seqs": 8}, {}, "vllm.---max-num-seqs", "at most two dashes"),
    # A section the flags add keys to must be a mapping, as it must be without them.
    ({"max-num-seqs": 64}, {"serving": "static"}, "serving", "got 'static', expected a mapping"),
    ({"data-parallel-size": 2}, {"cluster": 5}, "cluster", "got 5, expected a mapping"),
])
def test_bad_flags_name_themselves(vllm: Any, more: dict, where: str, message: str) -> None:
    with pytest.raises(ServesimError) as exc:
        scenario(vllm, **more)
    assert where in str(exc.value) and message in str(exc.value)


def test_nixl_flags_read_as_the_transfer_of_a_disaggregated_layout() -> None:
    # One flag set for both pools' servers, as vLLM's P/D examples launch them: the
    # transfer is the layout's own, priced on its link, so the run is the one without
    # the flag, with a note saying what was read and what not priced.
    layout = {"serving": {"policy": "disaggregated"},
              "disaggregated": {"link": {"kind": "infiniband"}}}
    cfg = {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cuda",
           "kv_connector_extra_config": {"backends": ["UCX"]}}
    pasted = scenario({"kv-transfer-config": json.dumps(cfg), "max-num-seqs": 8}, **layout)
    plain = scenario({"max-num-seqs": 8}, **layout)
    assert pasted.serving.policy == "disaggregated" and pasted.serving.kv_offload is None
    assert ("vllm.kv-transfer-config: NixlConnector: the prefill-to-decode KV transfer of "
            "serving.policy disaggregated, priced on disaggregated.link; not priced: "
            "backends, kv_buffer_device") in pasted.notes
    a, b = simulate(pasted), simulate(plain)
    assert a.first_token.tolist() == b.first_token.tolist()
    assert a.finish.tolist() == b.finish.tolist()


def test_flag_values_are_validated_where_they_land() -> None:
    with pytest.raises(ServesimError, match="serving.max_num_seqs: got 0"):
        scenario({"max-num-seqs": 0})


@pytest.mark.parametrize("flag, gpu, dtype, note", [
    ("awq", "h100-sxm", "int4", "int4 weights, weight-only (w4a16)"),
    ("gptq_marlin", "a100-80gb", "int4", "int4 weights, weight-only (w4a16)"),
    ("modelopt_fp4", "b200", "nvfp4", "nvfp4 weights on FP4 tensor cores"),
    ("modelopt_fp4", "h200", "nvfp4", "nvfp4 weights, weight-only on h200"),
])
def test_quantised_checkpoint_flags_set_the_weights_dtype(flag: str, gpu: str, dtype: str,
                                                          note: str) -> None:
    from sim.cost.models import build_cost

    sc = scenario({"quantization": flag}, hardware={"gpu": gpu}, cost={"roofline": {}})
    assert sc.model.dtype == dtype and sc.model.kv_dtype == "auto"
    assert note in build_cost(sc).source


@pytest.mark.parametrize("method, ours", [("eagle3", "eagle"), ("deepseek_mtp", "mtp"),
                                          ("mtp", "mtp"), ("ngram", "ngram")])
def test_speculative_config_sets_method_and_k_beside_the_scenarios_acceptance(
        method: str, ours: str) -> None:
    text = json.dumps({"method": method, "model": "org/head", "num_speculative_tokens": 3,
                       "prompt_lookup_max": 4})
    sc = scenario({"speculative-config": text}, model={"preset": "tiny", "mtp_layers": 1},
                  serving={"speculative": {"acceptance": {"rate": 0.6}}})
    spec = sc.serving.speculative
    assert spec is not None
    assert (spec.method, spec.num_tokens) == (ours, 3)
    assert spec.acceptance.mean_tokens(3) == pytest.approx((1 - 0.6**4) / (1 - 0.6))


def test_a_recipes_api_server_flags_change_nothing() -> None:
    plain = simulate(scenario({"max-num-seqs": 4}))
    pasted = simulate(scenario({"max-num-seqs": 4, "enable-auto-tool-choice": True,
                                "tool-call-parser": "hermes", "reasoning-parser": "qwen3",
                                "no-disable-custom-all-reduce": True, "load-format": "auto",
                                "stream-interval": 1, "max-cudagraph-capture-size": None}))
    assert pasted.first_token.tolist() == plain.first_token.tolist()


def test_prefix_caching_is_on_as_in_v1_where_modelled() -> None:
    # Unset, caching is on (V1's default) for the policies that cache; requests that
    # carry hashes share them, as a server with the same flags would.
    shared = {**WORKLOAD, "shared_prefix": {"tokens": 32, "groups": 1}}
    on = scenario({}, workload=shared)
    assert on.serving.prefix_caching is True
    assert simulate(on).replica_stats[0].prefix_hit_tokens == 5 * 32  # all but the first
    assert scenario({"enable-prefix-caching": False}).serving.prefix_caching is False
    # Where servesim does not model a cache: swap preemption without a host tier, or a
    # policy that does not cache (given in the scenario beside the flags).
    assert scenario({"preemption-mode": "swap"}).serving.prefix_caching is False
    assert scenario({}, serving={"policy": "orca"}).serving.prefix_caching is False
    # A plain serving section under chunked (vLLM v1's scheduler, the default) gets v1's
    # default too; vLLM v0's continuous kept v0's (off), and null asks for vLLM's anywhere.
    plain = {"model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
             "workload": WORKLOAD}
    assert from_dict(plain).serving.prefix_caching is True
    v0 = {**plain, "serving": {"policy": "continuous"}}
    assert from_dict(v0).serving.prefix_caching is False
    assert from_dict({**v0, "serving": {"policy": "continuous", "prefix_caching": None}}
                     ).serving.prefix_caching is True
    swap = {**plain, "serving": {"preemption": "swap"}}
    assert from_dict(swap).serving.prefix_caching is False  # not modelled with swap alone
    assert any("prefix caching (vLLM's default) is off" in n for n in from_dict(swap).notes)


def test_enable_prefix_caching_on_unique_prompts_runs_and_says_so() -> None:
    from sim.report.summary import summarize

    res = simulate(scenario({"enable-prefix-caching": True}))
    pc = summarize(res)["prefix_cache"]
    assert (pc["hit_tokens"], pc["prefill_tokens"]) == (0, 6 * 64)
    assert "no prefix hashes" in pc["note"]


def test_real_flag_sets_run_whole() -> None:
    # From public launch scripts (2025-2026): short spellings, launcher and API-server
    # flags, the vision tower left out, human-readable lengths, a kernel setting (run at
    # vLLM's default kernels, and said so), and a host KV tier of 64 GiB over 2 GPUs.
    sc = scenario({"model": "org/m", "tp": 2, "distributed-executor-backend": "mp",
                   "data-parallel-hybrid-lb": True, "dpl": 1, "enable-reasoning": True,
                   "language-model-only": True, "no-disable-hybrid-kv-cache-manager": True,
                   "max-model-len": "1K", "max-num-batched-tokens": "4k",
                   "max-cudagraph-capture-size": 2048,
                   "cc.pass_config.fuse_allreduce_rms": True,
                   "kv_offloading_backend": "native", "kv_offloading_size": 64})
    assert sc.hardware.tp == 2 and sc.model.max_context == 1024
    assert sc.serving.max_num_batched_tokens == 4000
    assert sc.serving.kv_offload is not None and sc.serving.kv_offload.cpu_gb == 32.0
    # The capture size bounds the graphed steps (sim/config/vllmcapture.py), priced; the
    # fusion pass is not.
    assert sc.serving.cuda_graph_max_tokens == 2048
    assert sc.notes == ("vllm.cc.pass_config.fuse_allreduce_rms: a kernel or compilation "
                        "setting, not priced: steps cost what vLLM's default kernels take",)
    from sim.report.printed import table
    from sim.report.summary import summarize

    s = summarize(simulate(sc))
    assert s["simulated"]["notes"] == list(sc.notes)
    assert "\nnote: vllm.cc.pass_config.fuse_allreduce_rms: a kernel" in table(s)
    # auto (or -1): the model's own context, from which vLLM's fitting starts.
    assert scenario({"max-model-len": "auto"}).model.max_context == scenario({}).model.max_context
    assert "notes" not in summarize(simulate(scenario({})))["simulated"]


def test_host_memory_connectors_are_a_write_through_tier() -> None:
    # vLLM's own offloading connector: cpu_bytes_to_use over the tp ranks; LMCache: its
    # size a rank, or its default 5 GB with a note; --kv-offloading-size alike. Each is
    # write-through, which also holds prefixes with the GPU's own cache off.
    own = scenario({"tp": 2, "kv-transfer-config": json.dumps(
        {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
         "kv_connector_extra_config": {"cpu_bytes_to_use": 16 * 2**30, "block_size": 64}})})
    tier = own.serving.kv_offload
    # vLLM's own: every full block copied, a hit loaded while the others run.
    assert tier is not None and (tier.cpu_gb, tier.write_policy, tier.store_outputs,
                                 tier.overlap) == (8.0, "write_through", True, True)
    assert own.notes == ("vllm.kv-transfer-config: block_size (64) is not priced: the host "
                         "tier moves whole KV blocks and drops its least recently used "
                         "entry",)
    lm = scenario({"no-enable-prefix-caching": True,
                   "kv-transfer-config": '{"kv_connector":"LMCacheConnectorV1", '
                                         '"kv_role":"kv_both"}'})
    tier = lm.serving.kv_offload
    # LMCache: the prompt's KV alone, a hit loaded before the step that needs it.
    assert tier is not None and (tier.cpu_gb, tier.write_policy, tier.store_outputs,
                                 tier.overlap) == (5.0, "write_through", False, False)
    assert not lm.serving.prefix_caching and lm.serving.caches_prefixes
    assert lm.notes == ("vllm.kv-transfer-config: no lmcache.max_local_cpu_size: the host "
                        "tier is LMCache's default, 5 GB a GPU (its config file or "
                        "environment may set another; give the key to say which)",)
    sized = scenario({"kv-transfer-config": {
        "kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.local_cpu": True,
                                      "lmcache.max_local_cpu_size": 40,
                                      "lmcache.save_decode_cache": True}}})
    tier = sized.serving.kv_offload
    assert tier is not None and (tier.cpu_gb, tier.store_outputs) == (40.0, True)
    assert sized.notes == ()
    alone = scenario({"kv-offloading-backend": "lmcache"})
    assert alone.serving.kv_offload is None and alone.notes == (
        "vllm.kv-offloading-backend: without kv-offloading-size it sets no host tier up "
        "(as vLLM's earlier releases; newer ones refuse it)",)
    for backend, way in (("native", (True, True)), ("lmcache", (False, False))):
        tier = scenario({"kv-offloading-size": 64, "tp": 4,
                         "kv-offloading-backend": backend}).serving.kv_offload
        assert tier is not None and (tier.cpu_gb, tier.write_policy) == (16.0, "write_through")
        assert (tier.store_outputs, tier.overlap) == way


def test_a_vllm_config_file_under_the_section_s_own_flags(tmp_path) -> None:
    (tmp_path / "serve.yaml").write_text("max-num-seqs: 32\nmax-model-len: 2048\nport: 8000\n")
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
           "workload": WORKLOAD, "vllm": {"config": "serve.yaml", "max_model_len": 1024}}
    sc = from_dict(raw, "<test>", tmp_path)
    assert (sc.serving.max_num_seqs, sc.model.max_context) == (32, 1024)
    (tmp_path / "bad.yaml").write_text("- 1\n")
    with pytest.raises(ServesimError, match="vllm.config: .*expected a mapping of vLLM flags"):
        from_dict({**raw, "vllm": {"config": "bad.yaml"}}, "<test>", tmp_path)


def test_quantization_fp8_keeps_a_block_scaled_checkpoint_s_scheme() -> None:
    raw = {"model": "qwen3-235b-a22b-fp8", "hardware": {"gpu": "h200", "tp": 8},
           "workload": WORKLOAD}
    assert from_dict({**raw, "vllm": {"quantization": "fp8"}}).model.dtype == "fp8-block"
    assert from_dict({**raw, "model": "qwen3-235b-a22b",
                      "vllm": {"quantization": "fp8"}}).model.dtype == "fp8"


def test_config_files_yield_to_the_section_in_any_spelling(tmp_path) -> None:
    (tmp_path / "a.yaml").write_text("enable-prefix-caching: true\nmax-num-seqs: 8\n")
    (tmp_path / "b.yaml").write_text("config: a.yaml\n")
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
           "workload": WORKLOAD}
    sc = from_dict({**raw, "vllm": {"config": "a.yaml", "no-enable-prefix-caching": True}},
                   "<test>", tmp_path)
    assert (sc.serving.prefix_caching, sc.serving.max_num_seqs) == (False, 8)
    with pytest.raises(ServesimError, match="b.yaml' names a config file of its own"):
        from_dict({**raw, "vllm": {"config": "b.yaml"}}, "<test>", tmp_path)


def test_compilation_mode_0_with_cuda_graphs_of_its_own_is_priced() -> None:
    """Mode 0 is refused only where it leaves vLLM without CUDA graphs: a cudagraph_mode
    given beside it keeps them, and a nonzero level is a compilation setting."""
    for value in ('{"mode": 0, "cudagraph_mode": "FULL"}', 3, '{"level": 3}'):
        sc = scenario({"compilation-config": value})
        assert sc.notes == ("vllm.compilation-config: a kernel or compilation setting, not "
                            "priced: steps cost what vLLM's default kernels take",)


def test_short_spellings_and_a_level_in_the_flag() -> None:
    sc = scenario({"tp": 2, "ep": True, "O3": True}, model="qwen3-30b-a3b",
                  cost="roofline", hardware={"gpu": "h100-sxm"})
    assert (sc.hardware.tp, sc.hardware.ep) == (2, 2)
    assert sc.notes == ("vllm.O3: a kernel or compilation setting, not priced: steps cost "
                        "what vLLM's default kernels take",)


@pytest.mark.parametrize("more, why", [
    ({"serving": {"policy": "static"}}, "policy static, preemption recompute"),
    ({"vllm": {"preemption-mode": "swap"}}, "policy chunked, preemption swap"),
])
def test_vllm_s_default_caching_off_where_not_modelled_is_said(more: dict, why: str) -> None:
    vllm = {"max-num-seqs": 8, **more.pop("vllm", {})}
    sc = scenario(vllm, **more)
    assert sc.serving.prefix_caching is False
    assert sc.notes == (
        "prefix caching (vLLM's default) is off: servesim models it under policies "
        f"continuous and chunked, preempting by recompute or with a host tier (here: {why})",)
    # The resolved default's own errors name the serving key (static and orca refuse a
    # host tier before the default is read).
    with pytest.raises(ServesimError, match="serving.kv_offload: the host tier holds"):
        scenario({}, serving={"policy": "disaggregated", "kv_offload": {"cpu_gb": 1}})
    with pytest.raises(ServesimError, match="serving.kv_offload: policy 'static' reserves"):
        scenario({}, serving={"policy": "static", "kv_offload": {"cpu_gb": 1}})


@pytest.mark.parametrize("raw", [{"vllm": {"max-model-len": 4097}},
                                 {"model": {"preset": "tiny", "max_context": 8192}}])
def test_context_past_the_models_positions_is_refused(raw: dict[str, Any]) -> None:
    """vLLM refuses a --max-model-len above the checkpoint's positions (4,096 for tiny);
    the same value is refused here, with the limit, not simulated as given."""
    spec = {"model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
            "workload": WORKLOAD, **raw}
    with pytest.raises(ServesimError, match=r"model\.max_context: (4,097|8,192) tokens is more "
                       r"than the 4,096 positions of the model \(preset tiny\).*give at most "
                       r"4,096"):
        from_dict(spec, "<test>")
    # At the limit it runs.
    assert scenario({"max-model-len": 4096}).model.max_context == 4096


def test_a_longer_context_names_the_preset_that_has_it() -> None:
    raw = {"model": "llama-3-8b", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
           "workload": WORKLOAD, "vllm": {"max-model-len": "16K"}}
    with pytest.raises(ServesimError, match=r"give at most 8,192, the preset llama-3\.1-8b \(the "
                       r"same shape, 131,072 positions\), RoPE scaling that stretches it "
                       r"\(model\.hf_overrides.*\), or a long-context"):
        from_dict(raw, "<test>")


def test_a_reshaped_preset_is_a_model_of_its_own_context() -> None:
    """Past a preset's dimensions the model is a custom one: its context is its own."""
    raw = {"model": {"preset": "tiny", "layers": 3, "max_context": 8192},
           "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}}, "workload": WORKLOAD}
    assert from_dict(raw, "<test>").model.max_context == 8192


DEEP = '{"pass_config": ' + "[" * 2000 + "]" * 2000 + "}"


@pytest.mark.parametrize("vllm, where, message", [
    # Read as the other JSON flags are: these had raised RecursionError (H1) or been
    # accepted with the generic note (H6).
    ({"compilation-config": DEEP}, "vllm.compilation-config", "nested too deeply to read"),
    ({"cc": DEEP}, "vllm.cc", "nested too deeply to read"),
    ({"compilation-config": '{"cudagraph_mode": "NONE"'}, "vllm.compilation-config",
     "not a JSON object (Expecting ',' delimiter at character 25)"),
    ({"compilation-config": "[1,2]"}, "vllm.compilation-config",
     "got [1, 2], expected a mapping (or its JSON text) with compilation settings"),
    ({"compilation-config": '"0"'}, "vllm.compilation-config", "got '0', expected a mapping"),
    ({"compilation-config": "NONE"}, "vllm.compilation-config", "not a JSON object"),
    ({"compilation-config": "null"}, "vllm.compilation-config", "got None, expected a mapping"),
    ({"compilation-config": 1.5}, "vllm.compilation-config",
     "got 1.5, expected a mapping (or its JSON text) with compilation settings (such as "
     "mode and cudagraph_mode), or an integer level"),
    ({"compilation-config": '{"mode": 0, "mode": 3}'}, "vllm.compilation-config",
     "key 'mode' given twice"),
    ({"compilation-config": '{"cudagraph_mode": "NONE", "cudagraph_mode": "FULL"}'},
     "vllm.compilation-config", "key 'cudagraph_mode' given twice"),
    # Floats and booleans as a level (H7): vLLM's own coercion is not relied on.
    ({"compilation-config": '{"mode": 0.0}'}, "vllm.compilation-config.mode",
     "got 0.0, expected an integer from 0 (no compilation) to 3 or a mode name (NONE, "
     "NO_COMPILATION, STOCK_TORCH_COMPILE, DYNAMO_TRACE_ONCE, VLLM_COMPILE, DYNAMO_AS_IS, "
     "DYNAMO_ONCE, PIECEWISE)"),
    # Any other word is no mode vLLM reads; it had passed with the not-priced note.
    ({"compilation-config": '{"mode": "fast"}'}, "vllm.compilation-config.mode",
     "got 'fast', expected an integer from 0"),
    ({"O": "fast"}, "vllm.O", "got 'fast', expected an integer from 0"),
    ({"compilation_config.level": "x"}, "vllm.compilation_config.level", "got 'x'"),
    ({"compilation-config": '{"level": -0.0}'}, "vllm.compilation-config.level", "got -0.0"),
    ({"compilation-config": '{"level": false}'}, "vllm.compilation-config.level",
     "got False, expected an integer"),
    ({"optimization-level": 0.0}, "vllm.optimization-level", "got 0.0, expected an integer"),
    ({"optimization-level": False}, "vllm.optimization-level", "got False, expected an integer"),
    ({"compilation_config.level": 0.0}, "vllm.compilation_config.level", "got 0.0"),
])
def test_compilation_config_is_read_as_the_other_json_flags(vllm: Any, where: str,
                                                            message: str) -> None:
    with pytest.raises(ServesimError) as exc:
        scenario(vllm)
    assert f"{where}: " in str(exc.value) and message in str(exc.value)


def test_a_bare_compilation_level_stays_a_level() -> None:
    """vLLM's integer forms of the flag: 0 is eager (refused), others get the note."""
    for value in ("3", " 3 ", 2):
        sc = scenario({"compilation-config": value})
        assert sc.notes == ("vllm.compilation-config: a kernel or compilation setting, not "
                            "priced: steps cost what vLLM's default kernels take",)
    for value in ("0", 0, '{"level": "0"}', {"mode": "-0"}):
        assert scenario({"compilation-config": value}).serving.cuda_graphs == "none"


EAGER_FLAGS = [{"enforce-eager": True}, {"optimization-level": 0}, {"O0": True},
               {"compilation-config": '{"cudagraph_mode": "NONE"}'},
               {"cc.cudagraph_mode": "none"},
               # Compilation mode (or level) 0 leaves cudagraph_mode at NONE in vLLM.
               {"compilation-config": 0}, {"cc": '{"level": 0}'},
               {"compilation-config": '{"mode": "NONE"}'},
               {"compilation-config": {"mode": 0}}, {"O.mode": 0},
               {"cc.level": "no_compilation"}]


@pytest.mark.parametrize("vllm", EAGER_FLAGS)
def test_flags_that_turn_cuda_graphs_off_run_every_step_eager(vllm: Any) -> None:
    sc = scenario(vllm)
    assert (sc.serving.cuda_graphs, sc.notes) == ("none", ())
    with pytest.raises(ServesimError, match=r"turns CUDA graphs off, while the scenario sets "
                                            r"serving.cuda_graphs 'all'"):
        scenario(vllm, serving={"cuda_graphs": "all"})


@pytest.mark.parametrize("vllm, graphs", [
    # A cudagraph_mode named anywhere decides over a compilation level of 0 anywhere, as
    # vLLM derives the mode from the level only when it is unset: the same settings as
    # one mapping, as dotted keys, or beside -O0.
    ({"compilation-config": {"mode": 0, "cudagraph_mode": "PIECEWISE"}}, "all"),
    ({"compilation-config.mode": 0, "compilation-config.cudagraph_mode": "PIECEWISE"}, "all"),
    ({"cc.level": 0, "cc.cudagraph_mode": "FULL_AND_PIECEWISE"}, "all"),
    ({"O0": True, "compilation-config": {"cudagraph_mode": "FULL"}}, "all"),
    ({"compilation-config": {"cudagraph_mode": "full_decode_only"}}, "decode"),
    ({"cc.cudagraph_mode": " NONE "}, "none"),
    ({"compilation-config": {"cudagraph_mode": " NONE "}}, "none"),
    # Not set: says nothing of graphs.
    ({"compilation-config.cudagraph_mode": None}, "auto"),
    ({"compilation-config": {"cudagraph_mode": None}}, "auto"),
])
def test_each_spelling_of_a_graph_mode_lands_alike(vllm: Any, graphs: str) -> None:
    assert scenario(vllm).serving.cuda_graphs == graphs


@pytest.mark.parametrize("vllm, more, message", [
    ({"cc.cudagraph_mode": 5}, {}, "got 5; vLLM's CUDA graph modes are NONE, "
     "FULL_DECODE_ONLY, PIECEWISE, FULL, FULL_AND_PIECEWISE"),
    ({"compilation-config": {"cudagraph_mode": ["NONE"]}}, {}, "got ['NONE']; vLLM's CUDA"),
    ({"compilation-config": {"cudagraph_mode": 0}}, {}, "got 0; vLLM's CUDA graph modes"),
    ({"optimization-level": -1}, {}, "got -1, expected an integer from 0 (no compilation) "
     "to 3"),
    ({"compilation-config": 7}, {}, "got 7, expected an integer from 0"),
    ({"compilation-config": {"cudagraph_mode": "FULL"}}, {"serving": {"cuda_graphs": "none"}},
     "asks for CUDA graphs 'all', while the scenario sets serving.cuda_graphs 'none'"),
    ({"enforce-eager": True, "cc.cudagraph_mode": "FULL_DECODE_ONLY"}, {},
     "while the scenario sets serving.cuda_graphs"),
])
def test_graph_modes_vllm_would_not_read_or_that_conflict_are_refused(
        vllm: Any, more: dict, message: str) -> None:
    with pytest.raises(ServesimError, match=re.escape(message)):
        scenario(vllm, **more)


def test_a_decode_cap_without_graphs_is_refused() -> None:
    with pytest.raises(ServesimError, match="serving.cuda_graph_max_bs: got 64, but "
                                            "cuda_graphs is none"):
        scenario({}, serving={"cuda_graphs": "none", "cuda_graph_max_bs": 64})


def test_enforce_eager_false_and_two_eager_flags_agree() -> None:
    assert scenario({"enforce-eager": False}).serving.cuda_graphs == "auto"
    assert scenario({"enforce-eager": True, "O0": True}).serving.cuda_graphs == "none"
    with pytest.raises(ServesimError, match="vllm.enforce-eager: got 'yes', expected true"):
        scenario({"enforce-eager": "yes"})


@pytest.mark.parametrize("vllm, where, message", [
    ({"kv-offloading-size": 1e300}, "vllm.kv-offloading-size",
     "got 1e+300, expected GiB (a finite number above 0 and at most 1,048,576, 1 PiB)"),
    ({"kv-transfer-config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                             "kv_connector_extra_config": {"cpu_bytes_to_use": 1e300}}},
     "vllm.kv-transfer-config.kv_connector_extra_config.cpu_bytes_to_use",
     "got 1e+300, expected bytes (a finite number above 0 and at most "
     "1,125,899,906,842,624, 1 PiB)"),
    ({"kv-transfer-config": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
                             "kv_connector_extra_config": {"lmcache.max_local_cpu_size":
                                                           1e300}}},
     "vllm.kv-transfer-config.kv_connector_extra_config.lmcache.max_local_cpu_size",
     "got 1e+300, expected GB a rank (a finite number above 0 and at most 1,048,576, 1 PiB)"),
])
def test_host_tier_sizes_past_a_pebibyte_are_refused(vllm: Any, where: str,
                                                      message: str) -> None:
    """The flags' sizes are bounded as serving.kv_offload.cpu_gb is (H2)."""
    with pytest.raises(ServesimError) as exc:
        scenario(vllm, hardware={"host_memory_gb": 1e6})
    assert f"{where}: {message}" in str(exc.value)


def test_a_flag_tier_under_one_block_is_refused_naming_the_flag() -> None:
    """1e-9 GiB over tp 2 holds no 16 KiB block shard: refused, not a 0-block tier (H8)."""
    with pytest.raises(ServesimError) as exc:
        scenario({"kv-offloading-size": 1e-9}, hardware={"tp": 2})
    assert str(exc.value) == (
        "<test>: serving.kv_offload.cpu_gb: got 5e-10 GiB per GPU, less than one KV block "
        "(16,384 bytes, 0.015625 MiB per GPU), so the tier would hold nothing; give at least "
        "1.53e-05 GiB, or 0 (as set by vllm.kv-offloading-size, whose size is over the "
        "tensor-parallel GPUs)")


@pytest.mark.parametrize("vllm, message", [
    # H11: a string where an integer is meant had read as a different tp than 1.
    ({"speculative-config": {"method": "eagle3", "num_speculative_tokens": 3,
                             "draft_tensor_parallel_size": "1"}},
     "vllm.speculative-config.draft_tensor_parallel_size: got '1' (a string), expected an "
     "integer equal to the target's tp (1), or null"),
    # -O<n> with false had been read as set (O0: false refused as eager, O3: false level 3).
    ({"O0": False}, "vllm.O0: got False: -O0 sets optimization level 0 and takes no value; "
                    "write O0: true, or leave it out (or give optimization-level: N)"),
    ({"O3": None}, "vllm.O3: got None: -O3 sets optimization level 3"),
    # An empty list had read as a mapping without a size.
    ({"kv-transfer-config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                             "kv_connector_extra_config": []}},
     "vllm.kv-transfer-config.kv_connector_extra_config: got [], expected a mapping"),
])
def test_a_vllm_value_of_the_wrong_kind_is_named_as_given(vllm: Any, message: str) -> None:
    serving = ({"speculative": {"acceptance": {"rate": 0.7}}} if "speculative-config" in vllm
               else {})
    with pytest.raises(ServesimError) as exc:
        scenario(vllm, serving=serving)
    assert message in str(exc.value)


@pytest.mark.parametrize(("gpu", "tokens", "seqs"), [("h100-sxm", 16384, 2048),
                                                     ("a100-80gb", 4096, 512)])
def test_throughput_mode_doubles_the_unset_batch_limits(gpu: str, tokens: int,
                                                        seqs: int) -> None:
    # vLLM's --performance-mode throughput doubles its default limits for the GPU
    # (8,192 and 1,024 on an H100, 2,048 and 256 on an A100), not the ones given.
    sc = scenario({"performance-mode": "throughput"}, hardware={"gpu": gpu})
    assert (sc.serving.max_num_batched_tokens, sc.serving.max_num_seqs) == (tokens, seqs)
    given = scenario({"performance-mode": "throughput", "max-num-batched-tokens": 4096},
                     hardware={"gpu": gpu})
    assert (given.serving.max_num_batched_tokens, given.serving.max_num_seqs) == (4096, seqs)
    balanced = scenario({"performance-mode": "balanced"}, hardware={"gpu": gpu})
    assert (balanced.serving.max_num_batched_tokens * 2, balanced.serving.max_num_seqs * 2) \
        == (tokens, seqs) and balanced.notes == ()


def test_interactivity_mode_is_said_unpriced_and_other_modes_refused() -> None:
    sc = scenario({"performance-mode": "interactivity"})
    assert sc.notes == ("serving.performance_mode: interactivity captures CUDA graphs at "
                        "finer batch sizes, which is not priced: steps cost what vLLM's "
                        "default kernels take",)
    with pytest.raises(ServesimError, match=r"performance_mode"):
        scenario({"performance-mode": "fastest"})
    with pytest.raises(ServesimError, match=r"serving\.performance_mode: got 'throughput': "
                                            r"vLLM v1's performance mode applies to policy "
                                            r"chunked"):
        scenario({}, serving={"policy": "continuous", "performance_mode": "throughput"})


def test_kv_cache_memory_bytes_size_the_cache_in_blocks() -> None:
    # Llama-3-8B on one H100: a 16-token block is 32 layers x 8 KV heads x 128 x 2 (K, V)
    # x 2 bytes x 16 = 2 MiB, so 10 GiB hold 5,120 blocks whatever memory_utilization says.
    raw = {"name": "q", "model": "llama-3-8b", "cost": "roofline",
           "hardware": {"gpu": "h100-sxm", "memory_utilization": 0.5},
           "vllm": {"kv-cache-memory-bytes": "10G"},
           "workload": WORKLOAD}
    sc = from_dict(raw, "<test>")
    assert sc.serving.num_gpu_blocks == 5120
    assert ("serving.kv_cache_memory_bytes: 10,737,418,240 bytes a GPU hold 5,120 KV blocks "
            "of 2,097,152 bytes (vLLM sizes its cache from them and does not read "
            "gpu_memory_utilization), run as serving.num_gpu_blocks") in sc.notes
    both = {**raw, "serving": {"num_gpu_blocks": 100}}
    with pytest.raises(ServesimError, match=r"serving\.kv_cache_memory_bytes: got "
                                            r"10,737,418,240 beside serving\.num_gpu_blocks"):
        from_dict(both, "<test>")
    with pytest.raises(ServesimError, match=r"serving\.kv_cache_memory_bytes: got 1,000 "
                                            r"bytes, under one KV block \(2,097,152"):
        from_dict({**raw, "vllm": {"kv-cache-memory-bytes": 1000}}, "<test>")
    # More than the GPU holds beside the weights: refused at the key given, in bytes (it
    # was refused as serving.num_gpu_blocks, a key the scenario never set, in blocks).
    with pytest.raises(ServesimError, match=r"serving\.kv_cache_memory_bytes: got "
                                            r"999,000,000,000 bytes, 930\.39 GiB per GPU, more "
                                            r"than the 64\.25 GiB .* give at most "
                                            r"68,981,620,736 bytes"):
        from_dict({**raw, "vllm": {"kv-cache-memory-bytes": 999_000_000_000}}, "<test>")


@pytest.mark.parametrize(("flags", "tokens"), [
    ({"max-cudagraph-capture-size": 1024}, 1024),
    ({"max-cudagraph-capture-size": "96"}, 96),
    ({"-cc.max_cudagraph_capture_size": 128}, 128),
    ({"cc.cudagraph_capture_sizes": [1, 2, 48]}, 48),
    ({"compilation-config": '{"cudagraph_capture_sizes": [1, 2, 48]}'}, 48),
    ({"compilation-config": {"max_cudagraph_capture_size": 64,
                             "cudagraph_capture_sizes": [8, 64]}}, 64),
    # The older scheduler flag: one value N captures 1, 2, 4 and multiples of 8 to N.
    ({"cuda-graph-sizes": [300]}, 296),
    ({"cuda-graph-sizes": 5}, 4),
    ({"cuda-graph-sizes": "1 2 64"}, 64),
    ({"cuda-graph-sizes": [1, 2, 100]}, 100),
])
def test_a_capture_size_flag_bounds_the_graphed_steps(flags: dict[str, Any],
                                                      tokens: int) -> None:
    sc = scenario(flags)
    assert sc.serving.cuda_graph_max_tokens == tokens
    assert sc.notes == ()  # priced: nothing to say is left out


@pytest.mark.parametrize(("flags", "message"), [
    ({"max-cudagraph-capture-size": 0},
     "vllm.max-cudagraph-capture-size: got 0, expected a positive whole number of tokens"),
    ({"max-cudagraph-capture-size": 2**60},
     f"vllm.max-cudagraph-capture-size: got {2**60}, expected a positive whole number of "
     "tokens below 2**53"),
    ({"max-cudagraph-capture-size": True}, "got True, expected a positive whole number"),
    ({"max-cudagraph-capture-size": [64]}, "got [64], expected a positive whole number"),
    ({"cuda-graph-sizes": [8, "x"]},
     "vllm.cuda-graph-sizes: got [8, 'x'], expected positive whole numbers of tokens"),
    ({"cuda-graph-sizes": [8, -16]}, "expected positive whole numbers of tokens"),
    ({"compilation-config": {"max_cudagraph_capture_size": 64,
                             "cudagraph_capture_sizes": [1, 48]}},
     "vllm.compilation-config: max_cudagraph_capture_size 64 is not the largest of "
     "cudagraph_capture_sizes (48)"),
    ({"max-cudagraph-capture-size": 64, "cuda-graph-sizes": [128]},
     "vllm.cuda-graph-sizes: sets the largest CUDA-graph capture size to 128 tokens, while "
     "serving.cuda_graph_max_tokens is 64"),
])
def test_a_capture_size_vllm_would_not_read_is_refused(flags: dict[str, Any],
                                                       message: str) -> None:
    with pytest.raises(ServesimError, match=re.escape(message)):
        scenario(flags)


def test_a_capture_size_meets_the_scenarios_own_and_eager_mode() -> None:
    with pytest.raises(ServesimError, match="serving.cuda_graph_max_tokens is 32"):
        scenario({"max-cudagraph-capture-size": 64}, serving={"cuda_graph_max_tokens": 32})
    assert scenario({"max-cudagraph-capture-size": 64},
                    serving={"cuda_graph_max_tokens": 64}).serving.cuda_graph_max_tokens == 64
    # Under enforce-eager vLLM captures nothing and reads no size: said, not refused.
    eager = scenario({"enforce-eager": True, "max-cudagraph-capture-size": 64})
    assert (eager.serving.cuda_graphs, eager.serving.cuda_graph_max_tokens) == ("none", None)
    assert eager.notes == ("vllm: CUDA graphs are off, so the capture size given is not read",)
    # The scenario's own key beside eager steps is refused, as cuda_graph_max_bs is.
    with pytest.raises(ServesimError, match="serving.cuda_graph_max_tokens: got 32, but "
                                            "cuda_graphs is none"):
        scenario({}, serving={"cuda_graph_max_tokens": 32, "cuda_graphs": "none"})
    # An empty list is not read (releases differ on it), and a note says so.
    empty = scenario({"cuda-graph-sizes": []})
    assert empty.serving.cuda_graph_max_tokens is None and len(empty.notes) == 1


@pytest.mark.parametrize("vllm, pattern", [
    # vLLM's CacheConfig takes these block sizes only; 7 once ran with exit 0.
    ({"block-size": 7}, r"vllm\.block-size: got 7; vLLM's --block-size takes 1, 8, 16, "
                        r"32, 64, 128 or 256"),
    ({"block-size": True}, r"vllm\.block-size: got True"),
    # vLLM's scheduler config refuses a step's token limit under max_num_seqs.
    ({"max-num-seqs": 4096, "max-num-batched-tokens": 256},
     r"max_num_batched_tokens: got 256, below max_num_seqs 4096: vLLM refuses"),
])
def test_flags_vllm_would_refuse_are_refused(vllm: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ServesimError, match=pattern):
        scenario(vllm)


def test_every_block_size_vllm_takes_is_taken() -> None:
    for size in (1, 8, 16, 32, 64, 128, 256):
        assert scenario({"block-size": size}).serving.block_size == size


def test_a_token_limit_below_the_default_sequence_limit_is_refused_as_vllm_does() -> None:
    # max_num_seqs left to vllm serve's default on an H100 (1,024): 512 tokens a step is
    # below it, which vLLM refuses at start-up; 1,024 is the least it takes.
    with pytest.raises(ServesimError, match="got 512, below max_num_seqs 1024"):
        scenario({"max-num-batched-tokens": 512}, hardware={"gpu": "h100-sxm"})
    sv = scenario({"max-num-batched-tokens": 1024}, hardware={"gpu": "h100-sxm"}).serving
    assert (sv.max_num_batched_tokens, sv.max_num_seqs) == (1024, 1024)
    # In the serving section both given is refused; a token limit alone keeps servesim's
    # own reading (the sequence limit defaulted beside it), and other policies are not
    # vLLM v1's scheduler: the check is chunked's.
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01}}, "workload": WORKLOAD,
           "serving": {"max_num_seqs": 4096, "max_num_batched_tokens": 16}}
    with pytest.raises(ServesimError, match=r"serving\.max_num_batched_tokens: got 16, "
                                            "below max_num_seqs 4096"):
        from_dict(raw, "<test>")
    raw["serving"] = {"max_num_batched_tokens": 64}
    assert from_dict(raw, "<test>").serving.max_num_batched_tokens == 64
    raw["serving"] = {"policy": "continuous", "max_num_seqs": 64, "max_num_batched_tokens": 32}
    assert from_dict(raw, "<test>").serving.max_num_batched_tokens == 32
