"""The evaluation formula, written once for both paths.

`assess` uses only + - * /, comparisons, `&`/`|` on booleans, and the helpers of `O` (where,
maximum, minimum, sqrt, floor): IEEE-exact operations. The batch path runs it on float64 arrays
with `O` = numpy; `twin.kernel.compile.scalar` rewrites the same source into plain Python with
inline conditionals for a single plan. Same operations in the same order: identical results.

Per-group sums (bytes of weights, gradients and optimizer states; FLOPs at each group's peak;
power mix; stability) are precomputed by `twin.kernel.tables` per part of the model: the
layers (attention + MLP + MoE precisions), the edges (embedding + head precisions) and the
norms, so a plan costs one lookup per part instead of one per group and quantity.

Physics, per GPU of a plan:
- memory (training): weights, gradients and optimizer states (+ fp32 master weights) of the
  parameter shard (tensor x pipeline parallel; ZeRO stages 1-3 shard states, gradients, weights
  over data parallel); activations per Korthikanti et al. with FlashAttention (34*s*b*h bytes a
  layer, 2*s*b*h with activation checkpointing) for the micro-batches in flight; fp32 logits.
  Serving: weights, the KV cache in the attention precision, a prefill workspace;
- time: FLOPs (6N per token, 8N with recomputation, 2N serving, plus attention over the context)
  at each group's peak x MFU; the pipeline bubble; ring all-reduces (tensor parallel per layer,
  data parallel for layer gradients, half hidden behind backward) over NVLink within a node and
  the network across nodes. A decode step is bound by the larger of compute and reading weights
  and KV cache from memory;
- power: (idle + utilisation x precision mix) x TDP; above the cap the GPU throttles and its
  speed falls with the square root of the power ratio;
- stability: the product of per-group stabilities; below STABLE_MIN training diverges.
"""

from __future__ import annotations

from typing import Any

HEADROOM = 0.08  # memory kept free for the framework, fragmentation, CUDA context
IDLE = 0.25  # board power at idle, as a fraction of TDP
GPUS_PER_NODE = 8.0
INTER_NODE_B_S = 50e9  # 400 Gb/s per GPU across nodes
ALPHA_S = 1e-5  # latency of one collective
REGIMES = 13  # the 12 training regimes (optimizer x ZeRO stage), then serving (neither matters)
STABLE_MIN = 0.5
FLOOR = 0.01
INF = float("inf")
# Reason bits (twin.kernel.plans.Reason).
OOM, UNSUPPORTED, POWER, PARALLELISM, UNSTABLE, ALL_FP8, ALL_FP32, ZERO_GPUS = (
    1, 2, 4, 8, 16, 32, 64, 128,
)  # fmt: skip
NOT_RUNNABLE = OOM | UNSUPPORTED | POWER | PARALLELISM | ZERO_GPUS


def assess(
    O: Any,
    T: Any,
    model: Any,
    gpu: Any,
    n: Any,
    tp: Any,
    pp: Any,
    pe: Any,
    pa: Any,
    pm: Any,
    px: Any,
    pn: Any,
    ph: Any,
    mode: Any,
    mb: Any,
    seq: Any,
    mbs: Any,
    opt: Any,
    zero: Any,
    ckpt: Any,
    cap_w: Any,
    tokens: Any,
) -> tuple[Any, ...]:
    """Per-plan verdict columns, in `twin.kernel.verdicts.COLUMNS` order."""
    train = mode == 0
    # Table keys: the precision plan's parts, per model, per regime (training: optimizer and
    # ZeRO stage; serving), per mode, and per accelerator.
    eh = pe * 6 + ph
    ke = model * 36 + eh
    kl = model * 216 + (pa * 6 + pm) * 6 + px
    regime = O.where(train, opt * 4 + zero, REGIMES - 1)
    kn = model * 6 + pn
    klr = kl * REGIMES + regime
    ker = ke * REGIMES + regime
    knr = kn * REGIMES + regime
    klm = kl * 2 + mode
    kem = ke * 2 + mode
    knm = kn * 2 + mode
    kgp = (gpu * T.model_count + model) * 6
    kga = kgp + pa
    kgm = kgp + pm
    kgx = kgp + px
    kge = gpu * T.edge_stride + ke

    # Parallelism: tp x pp shards, dp replicas (tp, pp, micro-batch sizes >= 1 by contract).
    n_layers = T.layers[model]
    inv_tp = 1.0 / tp
    inv_pp = 1.0 / pp
    inv_shards = inv_tp * inv_pp
    dp_exact = n / (tp * pp)
    dp_floor = O.floor(dp_exact)
    dp = O.maximum(dp_floor, 1.0)
    inv_dp = 1.0 / dp

    # Parameter state per GPU: A + B / dp per part (B is what ZeRO shards); the embedding sits
    # on the first pipeline stage, the head on the last.
    emb = T.a_emb[ker] + T.b_emb[ker] * inv_dp
    hed = T.a_head[ker] + T.b_head[ker] * inv_dp
    state = (
        (T.a_layer[klr] + T.b_layer[klr] * inv_dp) * inv_shards
        + (T.a_norm[knr] + T.b_norm[knr] * inv_dp) * inv_pp
        + O.where(pp > 1.0, O.maximum(emb, hed), emb + hed) * inv_tp
    )

    # Activations and logits (training); KV cache and workspace (serving).
    hid = T.hidden[model]
    tok_mb = mb * seq
    stage_layers = n_layers * inv_pp
    acts = (
        tok_mb * inv_tp
        * (hid * (stage_layers * O.minimum(pp, mbs) * T.act_per_layer[ckpt] + T.act_extra[ckpt])
           + T.vocab[model] * 4.0)
    )  # fmt: skip
    kv_cache = (
        stage_layers
        * O.maximum(T.kv_heads[model] * inv_tp, 1.0)
        * T.kv_bytes[model * 6 + pa]
        * tok_mb
    )
    serve_mem = kv_cache + tok_mb * (hid + T.vocab[model] * inv_tp) * 2.0
    mem = state + O.where(train, acts, serve_mem)

    # Time per step: compute (or memory, when decoding), bubble, communication.
    tokens_step = mb * O.where(train, seq * mbs, 1.0)
    compute_s = (
        T.flop_factor[mode * 2 + ckpt]
        * tokens_step
        * (
            (T.t_attn[kga] + T.t_mlp[kgm] + T.t_moe[kgx] + seq * T.t_seq[kga]) * inv_shards
            + T.t_head[kge] * inv_tp
        )
    )
    busy_s = O.where(train, compute_s, O.maximum(compute_s, (state + kv_cache) * T.inv_bw[gpu]))
    link = T.link_b_s[gpu]
    tp_s = O.where(
        tp > 1.0,
        stage_layers
        * O.where(train, 4.0 * mbs, 2.0)
        * (ALPHA_S + (4.0 - 4.0 * inv_tp) * mb * hid * O.where(train, seq, 1.0)
           / O.where(tp <= GPUS_PER_NODE, link, INTER_NODE_B_S)),
        0.0,
    )  # fmt: skip
    dp_s = O.where(
        train & (dp > 1.0),
        (1.0 - inv_dp) * T.g_layer[kl] * inv_shards
        / O.where(n <= GPUS_PER_NODE, link, INTER_NODE_B_S),
        0.0,
    )  # fmt: skip
    bubble = O.where(train, 1.0 + (pp - 1.0) / mbs, 1.0)
    step_s = busy_s * bubble + tp_s + dp_s

    # Power: utilisation x precision mix of the TDP; throttle above the cap.
    mix = (T.q_layer[kl] + seq * T.q_seq[kl] + T.q_head[ke] * pp) / (
        T.f_layer[kl] + seq * T.f_seq[kl] + T.f_head[ke] * pp
    )
    tdp = T.tdp_w[gpu]
    demand_w = tdp * (IDLE + (1.0 - IDLE) * busy_s / step_s * mix)
    cap = O.where(cap_w > 0.0, O.minimum(cap_w, tdp), tdp)
    throttle = O.where(demand_w > cap, O.sqrt(cap / demand_w), 1.0)
    supported = (
        T.sup_attn[kga] * T.sup_mlp[kgm] * T.sup_moe[kgx] * T.sup_edge[kge]
        * T.sup_norm[gpu * 6 + pn] > 0.0
    )  # fmt: skip
    step_s = O.where(supported, step_s / throttle, INF)

    # Throughput, money, stability, quality.
    tokens_per_s = dp * tokens_step / step_s
    usd_per_h = n * T.price_usd_h[gpu]
    job_s = tokens / O.maximum(tokens_per_s, 1e-12)
    stability = T.stab_edge[kem] * T.stab_layer[klm] * T.stab_norm[knm]
    x = tokens_per_s / O.maximum(usd_per_h, 1e-9) * T.inv_ref_tokens_per_usd_s[model * 2 + mode]
    quality = stability * x / (1.0 + x)

    # Reasons; inverse reward design floors all-FP8, all-FP32 and zero-GPU plans.
    deg = T.deg_edge[eh] & T.deg_layer[kl] & T.deg_norm[pn]
    no_gpus = n == 0.0
    reasons = O.where(
        no_gpus,
        ZERO_GPUS,
        (mem > T.usable_bytes[gpu]) * OOM
        + (supported == False) * UNSUPPORTED  # noqa: E712 (array-safe negation)
        + (cap < tdp * IDLE) * POWER
        + ((dp_floor != dp_exact) | (pp > n_layers)) * PARALLELISM
        + (stability < STABLE_MIN) * UNSTABLE
        + (deg == 1) * ALL_FP8
        + (deg == 2) * ALL_FP32,
    )
    # A plan that cannot run (out of memory, unsupported precision, power, parallelism, no
    # GPUs) earns the floor like a degenerate one; a runnable plan never scores below it.
    score = O.where(
        (reasons & NOT_RUNNABLE) == 0,
        O.where(deg > 0, FLOOR, O.maximum(quality, FLOOR)),
        FLOOR,
    )
    return (
        mem,
        step_s,
        tokens_per_s,
        O.minimum(demand_w, cap),
        throttle,
        stability,
        usd_per_h,
        job_s,
        score,
        reasons,
    )
