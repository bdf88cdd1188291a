"""vLLM v1's scheduler is the default: a scenario that names no policy runs ``chunked``
with ``vllm serve``'s batch limits for its GPU and no admission watermark; vLLM's own
scheduler keys (``long_prefill_token_threshold``, ``max_num_partial_prefills``) are
accepted in ``serving`` and in a pasted ``vllm`` section, with vLLM v1's limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim.cli import main
from sim.config.scenario import from_dict, load
from sim.config.serving import ServingConfig
from sim.errors import ServesimError

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = {"arrivals": {"process": "constant", "rate": 2.0},
            "lengths": {"prompt": {"dist": "fixed", "value": 64},
                        "output": {"dist": "fixed", "value": 8}},
            "num_requests": 4}


def scenario(**sections: Any) -> Any:
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01}}, "workload": WORKLOAD,
           **sections}
    return from_dict(raw, "<test>")


@pytest.mark.parametrize("gpu, tokens, seqs", [
    ("h100-sxm", 8192, 1024), ("h200", 8192, 1024), ("b200", 8192, 1024),
    ("a100-80gb", 2048, 256), ("l40s", 2048, 256),
])
def test_a_scenario_without_a_policy_runs_vllm_v1(gpu: str, tokens: int, seqs: int) -> None:
    sv = scenario(hardware={"gpu": gpu}).serving
    assert sv.policy == "chunked"
    assert (sv.max_num_batched_tokens, sv.max_num_seqs) == (tokens, seqs)
    assert (sv.chunk_budget, sv.watermark, sv.kv_watermark) == (tokens, 0.0, 0.0)
    assert (sv.long_prefill_token_threshold, sv.max_num_partial_prefills) == (0, 1)


def test_what_the_scenario_sets_is_kept() -> None:
    sv = scenario(serving={"max_num_seqs": 64, "watermark": 0.02}).serving
    assert (sv.policy, sv.max_num_seqs, sv.max_num_batched_tokens) == ("chunked", 64, 8192)
    assert sv.watermark == 0.02
    sv = scenario(serving={"max_num_batched_tokens": 512, "token_budget": 256}).serving
    assert (sv.max_num_batched_tokens, sv.chunk_budget) == (512, 256)


def test_other_policies_keep_vllm_v0_limits() -> None:
    # Not vLLM v1's scheduler, so not its GPU-dependent limits: v0's 256 sequences and
    # servesim's 8192-token cap on every GPU, and vLLM v0's 1% watermark.
    for gpu in ("h100-sxm", "l40s"):
        sv = scenario(hardware={"gpu": gpu}, serving={"policy": "continuous"}).serving
        assert (sv.max_num_seqs, sv.max_num_batched_tokens, sv.watermark) == (256, 8192, 0.01)


def test_the_dataclass_default_is_chunked_without_a_watermark() -> None:
    sv = ServingConfig()
    assert (sv.policy, sv.chunk_budget, sv.watermark) == ("chunked", 8192, 0.0)
    assert ServingConfig(policy="orca").watermark == 0.01


def test_the_quickstart_runs_vllm_v1() -> None:
    sv = load(ROOT / "scenarios" / "quickstart.yaml").serving
    assert (sv.policy, sv.max_num_seqs, sv.chunk_budget, sv.kv_watermark) == (
        "chunked", 1024, 8192, 0.0)


def test_vllm_scheduler_flags_land_on_serving_keys() -> None:
    sv = scenario(vllm={"long-prefill-token-threshold": 512,
                        "max-num-partial-prefills": 1}).serving
    assert (sv.long_prefill_token_threshold, sv.max_num_partial_prefills) == (512, 1)


@pytest.mark.parametrize("sections, where, message", [
    ({"serving": {"max_num_partial_prefills": 2}}, "serving.max_num_partial_prefills",
     "got 2; vLLM v1 runs only 1"),
    ({"vllm": {"max-num-partial-prefills": 4}}, "serving.max_num_partial_prefills",
     "got 4; vLLM v1 runs only 1"),
    ({"serving": {"policy": "continuous", "long_prefill_token_threshold": 256}},
     "serving.long_prefill_token_threshold", "applies to policy chunked only"),
    ({"serving": {"long_prefill_token_threshold": -1}}, "serving.long_prefill_token_threshold",
     "got -1"),
    ({"vllm": {"max-long-partial-prefills": 2}}, "vllm.max-long-partial-prefills",
     "models only 1"),
])
def test_bad_scheduler_settings_are_one_line(sections: dict, where: str, message: str) -> None:
    with pytest.raises(ServesimError) as exc:
        scenario(**sections)
    text = str(exc.value)
    assert where in text and message in text and "\n" not in text


def test_the_cli_refuses_partial_prefills_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", str(ROOT / "scenarios" / "quickstart.yaml"), "--set",
               "serving.max_num_partial_prefills=2", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err == ("servesim: error: " + str(ROOT / "scenarios" / "quickstart.yaml")
                   + ": serving.max_num_partial_prefills: got 2; vLLM v1 runs only 1 (it "
                   "refuses to start with more), and servesim models v1")
