"""What the model of each public serving row ran, where the row does not say it.

A row of ``silicon_sample.csv`` names a Hugging Face model, a precision and a GEMM
quantisation mode; it does not name the checkpoint, its KV cache's dtype or the launch
recipe's cache setting. These tables give them, each entry with the public file it rests
on: the presets servesim simulates each name with, the checkpoints whose own
quantisation fixes their weights' dtype or carries an FP8 KV cache, and the FP8 caches
InferenceX's launch recipes set. :func:`sim.validate.silicon.classify` reads them.
"""

from __future__ import annotations

from sim.cost.dtypes import ExpertDtype

# Hugging Face names of the dense models servesim has presets for.
MODEL_PRESETS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "nvidia/Llama-3.1-70B-Instruct-FP8": "llama-3.1-70b",
    "nvidia/Qwen3-32B-NVFP4": "qwen3-32b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1": "deepseek-r1",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b",
    "zhipuai/GLM-5": "glm-5",
}
# Labels the sample gives rows of checkpoints released with 4-bit experts, by the
# preset's expert dtype: gpt-oss (mxfp4 experts, the rest bf16) "fp4" (GEMM mode
# "nvfp4"), Kimi-K2.5 (int4 experts) "int4"; Kimi's "fp4" rows with NVFP4 GEMMs ran
# NVIDIA's checkpoint (:data:`NVFP4_MOE_CHECKPOINTS`), those without a GEMM mode say no
# more.
FOUR_BIT_LABELS = {"mxfp4": ("fp4", "mxfp4"), "int4": ("int4",)}
# The GEMM quantisation modes of FP8 rows, as servesim's weight dtypes.
FP8_MODES = {"fp8": "fp8", "fp8_block": "fp8-block"}
# Checkpoints whose own quantization_config fixes their weights' dtype whatever a row's
# label says: Qwen's FP8 releases are "fine-grained" FP8, weight_block_size [128, 128]
# (the sample labels some of their vLLM rows plain fp8).
# DeepSeek's V3 and R1 and MiniMax's M2.5 releases are block-scaled too (their rows say
# fp8); the sample's FP4 rows of those names (NVFP4 GEMMs) are not those releases.
CHECKPOINT_DTYPES = {"Qwen/Qwen3-235B-A22B-FP8": "fp8-block",
                     "deepseek-ai/DeepSeek-V3": "fp8-block",
                     "deepseek-ai/DeepSeek-R1": "fp8-block",
                     "MiniMaxAI/MiniMax-M2.5": "fp8-block",
                     # Its rows give the experts' mode as fp8_block: Qwen's FP8 release.
                     "Qwen/Qwen3.5-397B-A17B": "fp8-block",
                     # InferenceX's GLM-5 FP8 recipes serve zai-org/GLM-5-FP8 (128 x 128).
                     "zhipuai/GLM-5": "fp8-block"}
# Dense models whose per-tensor FP8 rows ran a ModelOpt export, by the framework that
# ran them: Qwen's own FP8 release of Qwen3-32B is block-scaled, so AIConfigurator's
# per-tensor rows of it are taken to have served the export its model list names
# Qwen/Qwen3-32B-FP8-Static-PerTensor (its hf_quant_config.json ships in
# aiconfigurator-core 0.12.0: quant_algo FP8, kv_cache_quant_algo FP8). TensorRT-LLM
# takes a checkpoint's FP8 KV cache when the run leaves the cache's dtype at auto (its
# quantization guide); vLLM only since PR 29980 (:func:`sim.cost.hfquant.
# checkpoint_fp8_kv`), later than the 0.12.0 of its rows. A bf16 cache could not
# have held what TensorRT-LLM 1.0.0rc3's rows ran unqueued: 64 clients of 4,096-token
# prompts and 256-token outputs on one H100 (79 GiB) hold 251k-279k tokens (lengths
# drawn in [0.8 L, L] or exact), 61-68 GiB in bf16 beside 32 GiB of weights; they
# measured 1.6 s TTFT, as at 128 output tokens, and 3.8 s only at 512 (265k-295k
# tokens), where an FP8 cache of 0.9 of the free memory (264k tokens) fills.
MODELOPT_FP8_KV = frozenset({("Qwen/Qwen3-32B", "trtllm")})
# Mixtures of experts whose FP4 rows' checkpoint is known, as (the other projections'
# dtype, the experts' dtype, the KV cache's). InferenceX's MiniMax-M2.5 FP4 recipes
# (minimaxm2.5_fp4_{b200,b300}.sh) serve nvidia/MiniMax-M2.5-NVFP4, quantised by ModelOpt's
# experts-only NVFP4 recipe with an FP8 KV cache: the routed experts' three projections at
# NVFP4, attention's projections, the router and the LM head left in bf16 (the model cards
# of requantised copies that match its hf_quant_config.json say so), KV scales calibrated
# in the checkpoint, and the B300 recipe passes --kv-cache-dtype fp8. (A bf16 cache would
# hold 114k tokens on one B200 beside the 125 GiB of weights: the tp 1 runs of 8,192-token
# prompts at 16 and 32 clients would have queued for seconds; they measured 348 and
# 500 ms.) DeepSeek's FP4 runs: :data:`QKV_BF16_CHECKPOINTS`.
NVFP4_MOE_CHECKPOINTS: dict[str, tuple[str, ExpertDtype, str]] = {
    "MiniMaxAI/MiniMax-M2.5": ("bf16", "nvfp4", "fp8"),
    # nvidia/Qwen3.5-397B-A17B-NVFP4 (its hf_quant_config.json ships in aiconfigurator-core
    # 0.12.0; InferenceX's qwen3.5_fp4_b200.sh serves it): routed experts NVFP4; attention,
    # the Gated DeltaNet projections, the shared experts and the LM head kept bf16; an FP8
    # KV cache. servesim gives shared experts the routed ones' dtype in memory (0.4 of
    # 1.5 GB a model, over the GPUs) and prices their GEMMs at the projections' bf16.
    "Qwen/Qwen3.5-397B-A17B": ("bf16", "nvfp4", "fp8"),
    # nvidia/Kimi-K2.5-NVFP4 (its config.json ships in aiconfigurator-core 0.12.0; the
    # NVFP4 Kimi checkpoint vLLM's Kimi-K2.5 recipe names for Blackwell): every layer's
    # self_attn* and the LM head left bf16 in its ignore list, the experts (and the first
    # layer's dense MLP) NVFP4, an 8-bit float KV-cache scheme, which vLLM's
    # kv-cache-dtype auto takes as FP8 since vllm-project/vllm PR 29980 (December 2025;
    # these rows ran 0.17 and 0.19).
    "moonshotai/Kimi-K2.5": ("bf16", "nvfp4", "fp8"),
    # nvidia/GLM-5-NVFP4 (its config.json and hf_quant_config.json ship in
    # aiconfigurator-core 0.12.0; InferenceX's glm5_fp4_b200.sh serves it): every
    # attention projection (the indexer's too) and the LM head excluded, so bf16; the
    # experts and the first three layers' dense MLPs NVFP4 (servesim keeps those dense
    # MLPs at the projections' bf16: 0.7B of 744B weights); an FP8 KV cache
    # (kv_cache_quant_algo FP8, and the recipe's --kv-cache-dtype fp8_e4m3).
    "zhipuai/GLM-5": ("bf16", "nvfp4", "fp8")}
# The checkpoint InferenceX's DeepSeek FP4 recipes serve (dsr1_fp4_b200.sh,
# dsr1_fp4_b200_trt.sh: nvidia/DeepSeek-R1-0528-NVFP4-v2; the sample's DeepSeek-V3 FP4
# rows are taken to have run the same), by ModelOpt's NVFP4 recipe as NVIDIA's DeepSeek
# NVFP4 exports lay out (nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json ships in
# aiconfigurator-core 0.12.0): every projection at NVFP4 but attention's q_a, q_b, kv_a
# and kv_b (and the LM head), kept bf16; an FP8 KV cache. Only InferenceX's rows: its
# recipes name the checkpoint, AIConfigurator's own runs do not.
QKV_BF16_CHECKPOINTS = {"deepseek-ai/DeepSeek-R1": "DeepSeek-R1-0528-NVFP4-v2",
                        "deepseek-ai/DeepSeek-V3": "DeepSeek-R1-0528-NVFP4-v2"}
# What InferenceX's launch recipes set that its rows do not record: an FP8 KV cache
# (`kv-cache-dtype: fp8` in vLLM's config, `kv_cache_config.dtype: fp8` in TensorRT-LLM's)
# for Llama-3.1-70B under both on every GPU, and for gpt-oss-120b under vLLM and
# TensorRT-LLM on B200 (SemiAnalysisAI/InferenceX, benchmarks/70b_fp8_*.sh,
# gptoss_fp4_b200.sh, gptoss_fp4_b200_trt.sh; its H200 TensorRT-LLM recipe keeps auto).
# Its DeepSeek recipes (dsr1_fp8_*.sh) do the same under TensorRT-LLM on every GPU and
# under SGLang on B200 (`--kv-cache-dtype fp8_e4m3`); SGLang on H200 keeps bf16. The
# sample's DeepSeek-V3 rows are taken to have run the same recipes. Its B300 recipes
# (single_node/dsr1_fp8_b300.sh, minimaxm2.5_fp8_b300.sh) say they reuse the B200 ones
# as they stood: B300 rows take the B200 rows' settings. Its GLM-5 FP8 recipes pass
# --kv-cache-dtype fp8_e4m3 on B200 and B300 (glm5_fp8_{b200,b300}.sh) and leave SGLang's
# default (the model's bf16) on H200 (glm5_fp8_h200.sh).
INFERENCEX_FP8_KV = frozenset({("meta-llama/Llama-3.1-70B", "vllm", None),
                               ("meta-llama/Llama-3.1-70B", "trtllm", None),
                               ("openai/gpt-oss-120b", "vllm", "b200_sxm"),
                               ("openai/gpt-oss-120b", "trtllm", "b200_sxm"),
                               ("deepseek-ai/DeepSeek-R1", "trtllm", None),
                               ("deepseek-ai/DeepSeek-V3", "trtllm", None),
                               ("deepseek-ai/DeepSeek-R1", "sglang", "b200_sxm"),
                               ("deepseek-ai/DeepSeek-V3", "sglang", "b200_sxm"),
                               ("deepseek-ai/DeepSeek-R1", "sglang", "b300_sxm"),
                               ("deepseek-ai/DeepSeek-V3", "sglang", "b300_sxm"),
                               ("zhipuai/GLM-5", "sglang", "b200_sxm"),
                               ("zhipuai/GLM-5", "sglang", "b300_sxm")})
