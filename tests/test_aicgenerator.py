"""AIConfigurator's own SGLang runs as its generator launched them: mixed chunks and a
prompt budget of the input length plus 1,500 where the release's template passes
--enable-mixed-chunk (sim/validate/aicgenerator.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import silicon_csv

from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.report.metrics import per_request
from sim.validate.aicgenerator import aic_recipe
from sim.validate.silicon import Case, classify
from sim.validate.siliconrecipes import scenario_raw
from sim.validate.siliconrows import read_rows


def case(tmp_path: Path, version: str, osl: int = 128, clients: int = 24,
         source: str = "") -> Case:
    """A Qwen3-32B row on two H100s under SGLang ``version``, 1,000-token prompts,
    AIConfigurator's collection unless ``source`` says otherwise; exact lengths."""
    src = source or f"source_file=/u/aic-auto-gap-analysis/data/h100_sxm/sglang/{version}/q.csv"
    row = (f"x,{src},sglang,{version},Qwen/Qwen3-32B,h100_sxm,,agg,1000,{osl},{clients},2,1,,"
           "300,20")
    c = classify(read_rows(silicon_csv(tmp_path, [row]))[0])
    assert isinstance(c, Case)
    return dataclasses.replace(c, lengths="exact")


@pytest.mark.parametrize(("version", "policy", "budget"), [
    ("0.5.6.post2", "orca", 2500),  # cli_args.0.5.6.post2.j2 passes --enable-mixed-chunk
    ("0.5.3.post2", "orca", 2500),
    ("0.5.4.post3", "orca", 2500),
    ("0.5.1.post1", "continuous", 8192),  # its template tests a misspelt key
    ("0.5.8.post1", "continuous", 8192),  # the generic template: the same misspelling
])
def test_the_generators_template_decides_whether_decodes_ride_in_prefill_batches(
        tmp_path: Path, version: str, policy: str, budget: int) -> None:
    serving = scenario_raw(case(tmp_path, version))["serving"]
    assert (serving["policy"], serving["max_num_batched_tokens"]) == (policy, budget)


def test_only_aiconfigurators_own_runs_take_its_generators_settings(tmp_path: Path) -> None:
    ix = case(tmp_path, "0.5.6.post2", source="db-dump/2026; c")
    assert ix.row.collection == "inferencex" and aic_recipe(ix) == {}
    serving = scenario_raw(ix)["serving"]
    assert serving["policy"] == "continuous"


def test_a_long_output_keeps_the_prompt_budget_under_mixed_chunks(tmp_path: Path) -> None:
    # Prefill batches apart from decodes are widened to prompt + output (a preempted
    # request is recomputed in one batch); a mixed batch keeps max_prefill_tokens.
    mixed = scenario_raw(case(tmp_path, "0.5.6.post2", osl=2000))["serving"]
    apart = scenario_raw(case(tmp_path, "0.5.1.post1", osl=9000))["serving"]
    assert mixed["max_num_batched_tokens"] == 2500
    assert apart["max_num_batched_tokens"] == 10000


def finishes_of_first_cycle(c: Case) -> int:
    """Distinct instants at which the first request of each client finished."""
    res = simulate(from_dict(scenario_raw(c)))
    assert per_request(res)["ttft"].size == 10 * c.row.concurrency
    return len(np.unique(res.finish[:c.row.concurrency]))


def test_mixed_chunks_spread_a_closed_loops_cohort(tmp_path: Path) -> None:
    # 24 clients send 1,000-token prompts at once. Prefill batches apart from decodes
    # (8,192 tokens: 8, 8 and 8 prompts) run before any decode, so all 24 requests decode
    # together, finish in one step and come back as one burst. With mixed chunks two
    # prompts fit each 2,500-token batch beside the decodes (1,000 + 1,000 + up to 24),
    # so the 24 start decoding in 12 pairs and finish at 12 instants.
    assert finishes_of_first_cycle(case(tmp_path, "0.5.1.post1", osl=64)) == 1
    assert finishes_of_first_cycle(case(tmp_path, "0.5.6.post2", osl=64)) == 12


def trt_case(tmp_path: Path, version: str = "1.0.0rc3", clients: int = 24,
             source: str = "") -> Case:
    """A Llama-3.1-8B row on one H100 under TensorRT-LLM ``version``, 1,000-token prompts,
    AIConfigurator's collection unless ``source`` says otherwise."""
    src = source or f"source_file=/u/aic-auto-gap-analysis/data/h100_sxm/trtllm/{version}/l.csv"
    row = (f"t,{src},trtllm,{version},meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,1000,128,"
           f"{clients},1,1,,300,20")
    c = classify(read_rows(silicon_csv(tmp_path, [row]))[0])
    assert isinstance(c, Case)
    return c


def test_tensorrt_llms_generator_sizes_the_batch_and_the_step_from_the_prompt(
        tmp_path: Path) -> None:
    # trtllm.rule: max_batch_size raised to 512 (doubled from 512 clients up), max_num_tokens
    # that plus the prompt plus 1,500, up to a multiple of 32: 512 + 1,000 + 1,500 = 3,012
    # -> 3,040; at 600 clients 1,200 + 2,500 = 3,700 -> 3,712.
    serving = scenario_raw(trt_case(tmp_path))["serving"]
    assert (serving["policy"], serving["max_num_batched_tokens"],
            serving["max_num_seqs"]) == ("orca", 3040, 512)
    serving = scenario_raw(trt_case(tmp_path, clients=600))["serving"]
    assert (serving["max_num_batched_tokens"], serving["max_num_seqs"]) == (3712, 1200)
    # InferenceX's runs keep TensorRT-LLM's defaults (their recipes, where known, aside).
    ix = trt_case(tmp_path, source="db-dump/2026; c")
    assert aic_recipe(ix) == {}
    assert scenario_raw(ix)["serving"]["max_num_batched_tokens"] == 8192


def test_the_1_0_0rc3_template_gives_the_kv_cache_0_8_of_free_memory(tmp_path: Path) -> None:
    # extra_engine_args.1.0.0rc3.yaml.j2 defaults free_gpu_memory_fraction to 0.80, later
    # templates (1.2.0rc6.post1) to 0.90, TensorRT-LLM's own default.
    old = scenario_raw(trt_case(tmp_path))["serving"]["num_gpu_blocks"]
    new = scenario_raw(trt_case(tmp_path, "1.2.0rc6.post1"))["serving"]["num_gpu_blocks"]
    assert aic_recipe(trt_case(tmp_path))["free_fraction"] == 0.8
    assert "free_fraction" not in aic_recipe(trt_case(tmp_path, "1.2.0rc6.post1"))
    assert abs(old - new * 0.8 / 0.9) <= 1
