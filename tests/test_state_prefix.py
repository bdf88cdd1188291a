"""Prefix caching of a model with Gated DeltaNet layers as vLLM's align mode keeps it:
prompt chunks cut on the block grid, a state snapshot kept where a step ends on it, a
hit resuming only from a kept snapshot, trace hashes of any size chained into the
model's large blocks, and what is refused or turned off."""

from __future__ import annotations

from typing import Any

import pytest

from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.core.kvmanager import KVCacheManager
from sim.core.prefix import PrefixCache, chained_blocks
from sim.core.request import Request
from sim.errors import ServesimError
from sim.policies.chunked import grid_chunk
from sim.report.summary import summarize

N = 784  # Qwen3.5-27B's block under vLLM (test_state_pool.py)


def _raw(prompt: int = 2000, shared: dict[str, Any] | None = None, rate: float = 0.05,
         n: int = 3, **serving: Any) -> dict[str, Any]:
    wl: dict[str, Any] = {"arrivals": {"process": "poisson", "rate": rate},
                          "num_requests": n, "seed": 0,
                          "lengths": {"prompt": {"dist": "fixed", "value": prompt},
                                      "output": {"dist": "fixed", "value": 4}}}
    if shared is not None:
        wl["shared_prefix"] = shared
    # Prefix caching asked for, as vLLM needs it to be for these models (its default: off).
    return {"name": "q", "model": "qwen3.5-27b", "hardware": {"gpu": "h200", "tp": 1},
            "cost": "roofline",
            "serving": {"policy": "chunked", "prefix_caching": True, **serving}, "workload": wl}


def _chunks(res: Any, over: int = 1) -> list[int]:
    """Every prompt chunk the run computed (entries of more than ``over`` tokens: a
    verify of k drafted tokens computes k + 1), in order."""
    assert res.step_log is not None
    return [n for step in res.step_log for _, n, _ in step[3] if n > over]


def test_grid_chunk_by_hand() -> None:
    r = Request(0, 0.0, 2000, 4)
    # Before the last multiple of 784 in its tokens (1,568), a chunk ends on the grid:
    assert grid_chunk(r, 0, 8192, N) == 1568  # cut at the last one
    assert grid_chunk(r, 0, 1000, N) == 784   # rounded down
    assert grid_chunk(r, 0, 700, N) == 0      # none in reach: not this step
    assert grid_chunk(r, 784, 8192, N) == 784
    assert grid_chunk(r, 1568, 432, N) == 432  # the tail, whole (or what fits)
    assert grid_chunk(r, 1568, 100, N) == 100
    # A resumed request's tokens are its prompt and what it generated.
    s = Request(1, 0.0, 1000, 700)
    s.generated = 600
    assert grid_chunk(s, 0, 8192, N) == 1568


def test_a_prompt_prefills_in_two_steps_cut_at_the_grid() -> None:
    on = simulate(from_dict(_raw(n=1)), log_steps=True)
    off = simulate(from_dict(_raw(n=1, prefix_caching=False)), log_steps=True)
    assert _chunks(on) == [1568, 432]
    assert _chunks(off) == [2000]
    assert on.first_token[0] > off.first_token[0]


def test_a_hit_resumes_from_the_snapshot_where_the_chunk_ended() -> None:
    # One group shares its first 2,048 tokens; a request's first chunk ends at 1,568
    # (inside them), so the next request, arriving after it finished, hits 1,568 tokens
    # and prefills its last 432 in one step.
    res = simulate(from_dict(_raw(shared={"tokens": 2048, "groups": 1, "block_tokens": 16})),
                   log_steps=True)
    s = summarize(res)
    assert s["prefix_cache"]["hit_tokens"] == 2 * 1568
    assert _chunks(res) == [1568, 432, 432, 432]


def test_no_snapshot_inside_the_shared_part_no_hit() -> None:
    # Prompts of 3,000: the first chunk ends at 2,352, past the 2,048 shared tokens: the
    # blocks before it are cached but no state is kept at their ends, so nothing hits.
    res = simulate(from_dict(_raw(prompt=3000,
                                  shared={"tokens": 2048, "groups": 1, "block_tokens": 16})))
    assert summarize(res)["prefix_cache"]["hit_tokens"] == 0


def test_snapshots_are_counted_and_evictable_by_hand() -> None:
    kv = KVCacheManager(20, N, state_blocks=3, snapshot_blocks=3)
    pc = kv.enable_prefix_caching(N)
    assert pc.state_pages == 3
    r = Request(0, 0.0, 2000, 4)
    r.hashes = (11, 12)
    assert kv.allocate_slots(r, 1568) == 2 + 3  # two blocks of tokens, three of states
    r.computed = 1568
    kv.cache_computed([r])  # the step ended on the grid after block 2: a snapshot
    assert (kv.used, pc.evictable) == (8, 3)
    assert kv.allocate_slots(r, 432) == 1
    r.computed = 2000
    kv.cache_computed([r])  # the prompt's two full blocks join the cache
    kv.free(r)
    # Same blocks, same snapshot: a hit of 1,568 tokens, its two blocks unreferenced.
    s = Request(1, 1.0, 2000, 4)
    s.hashes = (11, 12)
    hit = kv.computed_tokens(s)
    assert (hit.tokens, hit.pinned) == (1568, 2)
    # Same first block but no snapshot after it: no hit.
    t = Request(2, 1.0, 2000, 4)
    t.hashes = (11, 99)
    assert kv.computed_tokens(t).tokens == 0
    # Evicting everything frees the snapshot's three blocks too.
    assert kv.allocate_blocks(kv.available)
    assert kv.used == 20 and pc.evictable == 0 and not pc.has_state(12)


def test_hashes_of_other_sizes_chain_into_blocks() -> None:
    # 512-token hashes (a Mooncake trace's) over 784-token blocks: block 0 spans hashes
    # 0-1, block 1 hashes 1-3; a third block would need hash 4.
    a = chained_blocks([1, 2, 3, 4], 512, N)
    b = chained_blocks([1, 2, 30, 4], 512, N)
    assert len(a) == 2 and a[0] == b[0] and a[1] != b[1]
    assert a == chained_blocks([1, 2, 3, 4], 512, N)  # the same keys every run


def test_what_is_refused_or_turned_off() -> None:
    # vLLM's default for these models: off, and said.
    raw = _raw()
    del raw["serving"]["prefix_caching"]
    sc = from_dict(raw)
    assert sc.serving.prefix_caching is False
    assert ("prefix caching is off: vLLM leaves it off for a model with linear-attention "
            "layers (qwen3.5-27b) unless --enable-prefix-caching asks for it "
            "(serving.prefix_caching: true, modelled as its align mode)") in sc.notes
    for serving, match in (
            ({"policy": "continuous"}, "policy chunked"),
            ({"linear_state_pool": "reserved"}, "linear_state_pool kv_cache")):
        with pytest.raises(ServesimError, match=rf"serving\.prefix_caching.*{match}"):
            from_dict(_raw(**serving))
        raw = _raw(**serving)
        del raw["serving"]["prefix_caching"]
        sc = from_dict(raw)
        assert sc.serving.prefix_caching is False
        assert serving.get("policy") == "continuous" or any(
            "prefix caching is off" in n and match in n for n in sc.notes)
    with pytest.raises(ServesimError, match=r"serving\.long_prefill_token_threshold: got "
                                            r"500 .*784-token blocks"):
        from_dict(_raw(long_prefill_token_threshold=500))
    from_dict(_raw(long_prefill_token_threshold=500, prefix_caching=False))
    # A step's budget under the raised block is refused with or without the cache.
    with pytest.raises(ServesimError, match=r"serving\.max_num_batched_tokens: got 512.*"
                                            r"block_size 784 \(the block vLLM raises"):
        from_dict(_raw(max_num_batched_tokens=512, prefix_caching=False))


MTP = {"method": "mtp", "num_tokens": 2, "acceptance": {"rate": 0.7}}


def test_an_mtp_head_backs_the_last_cut_off_a_block() -> None:
    # Drafting 2 tokens widens the convolution window by 2: an 800-token block
    # (test_state_pool.py). The last cut comes a block before the last boundary, so a
    # hit keeps a full block past its snapshot when it gives up its last block.
    r = Request(0, 0.0, 2000, 4)
    assert grid_chunk(r, 0, 8192, 800, 800) == 800
    assert grid_chunk(r, 800, 1200, 800, 800) == 1200
    res = simulate(from_dict(_raw(shared={"tokens": 2048, "groups": 1, "block_tokens": 16},
                                  speculative=dict(MTP))), log_steps=True)
    assert res.scenario.serving.block_size == 800
    # The first request: 800 then 1,200; each later one hits 800 (two blocks cached, the
    # snapshot after the first) and prefills its last 1,200 at once.
    assert _chunks(res, over=3) == [800, 1200, 1200, 1200]
    assert summarize(res)["prefix_cache"]["hit_tokens"] == 2 * 800


def test_a_head_s_hit_gives_up_its_last_block() -> None:
    plain, headed = PrefixCache(16, 16), PrefixCache(16, 16, drop_last=True)
    for pc in (plain, headed):
        for h in (11, 12, 13):
            pc.publish(h)
    assert plain.match((11, 12, 13), 100) == (3, 0)
    assert headed.match((11, 12, 13), 100) == (2, 0)
    # With states: a snapshot after the third block only. Without a head the hit ends
    # there; with one it needs a snapshot a block earlier, and there is none.
    s_plain = PrefixCache(16, 16, state_pages=3)
    s_head = PrefixCache(16, 16, state_pages=3, drop_last=True)
    for pc in (s_plain, s_head):
        for h in (11, 12, 13):
            pc.publish(h)
        pc.add_state(13)
    assert s_plain.match((11, 12, 13), 100) == (3, 0)
    assert s_head.match((11, 12, 13), 100) == (0, 0)
    s_head.add_state(12)
    assert s_head.match((11, 12, 13), 100) == (2, 0)


@pytest.mark.parametrize("mode", ["none", "align", "all"])
def test_vllm_s_mamba_cache_mode_flag_changes_nothing(mode: str) -> None:
    raw = _raw()
    del raw["serving"]["prefix_caching"]
    raw["vllm"] = {"mamba-cache-mode": mode, "enable-prefix-caching": True}
    sc = from_dict(raw)
    base = from_dict(_raw())
    assert (sc.serving.prefix_caching, sc.serving.block_size) == (True, 784)
    assert sc.serving == base.serving
    raw["vllm"]["mamba-cache-mode"] = "dense"
    with pytest.raises(ServesimError, match=r"vllm\.mamba-cache-mode: got 'dense': servesim "
                                            r"models only none or align or all$"):
        from_dict(raw)


def _first_chunk(total: int) -> tuple[KVCacheManager, PrefixCache, Request]:
    """A manager of ``total`` blocks of 784 tokens, a request without prefix hashes whose
    first chunk (1,568 tokens, ending on the grid) has just run."""
    kv = KVCacheManager(total, N, state_blocks=3, snapshot_blocks=3)
    pc = kv.enable_prefix_caching(N)
    r = Request(0, 0.0, 2000, 4)
    assert kv.allocate_slots(r, 1568) == 5
    r.computed = 1568
    kv.cache_computed([r])
    assert r.hashes is not None and len(r.hashes) == 2
    return kv, pc, r


def test_a_preempted_request_resumes_from_its_own_snapshot() -> None:
    # The snapshot at the chunk's end takes keys of its own (vLLM hashes every block)
    # and 3 blocks.
    kv, pc, r = _first_chunk(20)
    assert kv.used == 8 and pc.has_state(r.hashes[1])  # type: ignore[index]
    kv.preempt(r)
    r.computed = 0  # (the replica resets it)
    assert kv.computed_tokens(r).tokens == 1568
    # No room for a snapshot at the chunk's end (6 blocks): at preemption its own state
    # pages become the snapshot, as vLLM frees the state page with its hash.
    kv, pc, s = _first_chunk(6)
    assert kv.used == 5 and not pc.has_state(s.hashes[1])  # type: ignore[index]
    kv.preempt(s)
    # Its two blocks and three state pages stay, all cached and evictable.
    assert (kv.used, pc.evictable) == (5, 5) and pc.has_state(s.hashes[1])  # type: ignore[index]
    s.computed = 0
    hit = kv.computed_tokens(s)
    assert (hit.tokens, hit.pinned) == (1568, 2)


def test_a_tiny_cache_does_not_thrash_its_prompts() -> None:
    # 20 blocks of 784 tokens, prompts of 4,500 to 6,000 (about 10 blocks each with their
    # states): a request preempted while its prompt runs resumes after its computed
    # blocks; it had been preempted and recomputed from scratch step after step (4,223
    # preemptions over 100 requests).
    raw = _raw(prompt=5000, rate=4.0, n=40, num_gpu_blocks=20)
    raw["workload"]["lengths"] = {"prompt": {"dist": "uniform", "low": 4500, "high": 6000},
                                  "output": {"dist": "uniform", "low": 1, "high": 400}}
    s = summarize(simulate(from_dict(raw)))
    assert s["requests"]["finished"] == 40
    assert s["preemptions"] < 40
