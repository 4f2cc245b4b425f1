"""Lookup tables the formula reads, built once from `data/*.json`.

Every table is flat (float64, or int64 for the degenerate-plan bits), so one index expression
reads it on numpy arrays and, once `twin.kernel.jit` has packed the tables, in compiled code.
Keys: kl = model * 216 + layer precisions (attention * 36 + mlp * 6 + moe); ke = model * 36 +
edge precisions (embedding * 6 + head); kn = model * 6 + norm precision; kgl / kge prefix those
with the accelerator: (gpu * n_models + model) * 216 + ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from twin.kernel.formula import REGIMES
from twin.kernel.plans import PRECISIONS

BYTES = (4.0, 4.0, 2.0, 2.0, 1.0, 1.0)
"""Storage bytes per parameter by precision (tf32 is stored as fp32)."""
GRAD_BYTES = (4.0, 4.0, 2.0, 2.0, 2.0, 2.0)
"""Gradient bytes: 8-bit formats keep 16-bit gradients."""
MASTER_BYTES = (0.0, 0.0, 4.0, 4.0, 4.0, 4.0)
"""Extra fp32 master weights kept by an optimizer for low-precision parameters."""
OPTIMIZER_BYTES = (0.0, 4.0, 8.0)
"""Optimizer state bytes per parameter: none, SGD momentum, Adam (m and v in fp32)."""
POWER_FACTOR = (0.8, 0.9, 1.0, 1.0, 1.1, 1.05)
"""Board power at full tensor utilisation relative to BF16, by precision."""

# Stability of a layer group in a precision: 1 is numerically safe; the product over groups below
# STABLE_MIN diverges. FP8 on embeddings, norms or the output head breaks training; BF16 on
# attention is safe; FP16 risks overflow. Serving tolerates low precision far better.
STABILITY = {
    "train": {
        "embedding": (1.0, 1.0, 0.97, 0.93, 0.20, 0.30),
        "attention": (1.0, 1.0, 0.97, 0.88, 0.60, 0.50),
        "mlp": (1.0, 1.0, 0.98, 0.93, 0.85, 0.70),
        "moe": (1.0, 1.0, 0.97, 0.90, 0.75, 0.60),
        "norm": (1.0, 1.0, 0.90, 0.80, 0.10, 0.10),
        "head": (1.0, 1.0, 0.95, 0.90, 0.20, 0.30),
    },
    "infer": {
        "embedding": (1.0, 1.0, 0.99, 0.97, 0.50, 0.70),
        "attention": (1.0, 1.0, 0.99, 0.96, 0.90, 0.85),
        "mlp": (1.0, 1.0, 0.99, 0.97, 0.95, 0.92),
        "moe": (1.0, 1.0, 0.99, 0.96, 0.93, 0.90),
        "norm": (1.0, 1.0, 0.97, 0.93, 0.30, 0.30),
        "head": (1.0, 1.0, 0.98, 0.96, 0.60, 0.70),
    },
}

MFU = 0.55  # fraction of peak a large matmul reaches
BW_EFF = 0.8  # fraction of memory bandwidth a decode step reaches
HEADROOM = 0.08  # memory kept free for the framework, fragmentation, CUDA context
REFERENCE_GPU = "h100"
REFERENCE_MFU = 0.5
REFERENCE_DECODE_BATCH = 64
FP8, FP32 = 4, 0


@dataclass(frozen=True)
class Tables:
    """Flat lookup tables for the formula; see `build` for what each holds and its key."""

    gpu_names: tuple[str, ...]
    model_names: tuple[str, ...]
    model_count: int
    edge_stride: int  # n_models * 36: kge = gpu * edge_stride + ke
    # Per accelerator.
    usable_bytes: Any
    inv_bw: Any  # seconds per byte read at the achievable bandwidth
    link_b_s: Any
    tdp_w: Any
    price_usd_h: Any
    # Per model.
    layers: Any
    hidden: Any
    vocab: Any
    kv_heads: Any
    kv_bytes: Any  # model * 6 + attention precision: K and V bytes per head dimension
    inv_ref_tokens_per_usd_s: Any  # model * 2 + mode: 3600 / reference tokens per dollar
    flop_factor: Any  # mode * 2 + checkpointing: FLOPs per parameter per token (6, 8, 2, 2)
    act_per_layer: Any  # checkpointing: activation bytes per token x hidden per layer in flight
    act_extra: Any  # checkpointing: the one layer recomputed in full
    # Keyed by part x regime (part key * REGIMES + optimizer * 4 + ZeRO stage when training,
    # + REGIMES - 1 when serving).
    a_layer: Any  # parameter-state bytes kept whole ...
    b_layer: Any  # ... and sharded by ZeRO over dp
    a_norm: Any
    b_norm: Any
    a_emb: Any
    b_emb: Any
    a_head: Any
    b_head: Any
    # Keyed by part (kl, ke): what depends on the precisions only. (Kept apart from the
    # regimes' copies, the tables stay small enough to stay in cache.)
    g_layer: Any  # gradient bytes of the layers
    f_layer: Any  # FLOPs per token per unit of the FLOP factor ...
    f_seq: Any  # ... per token of context (attention)
    f_head: Any
    q_layer: Any  # the same weighted by each group's power factor
    q_seq: Any
    q_head: Any
    # Keyed by part x mode (part key * 2 + mode): stability, training or serving.
    stab_layer: Any
    stab_edge: Any
    stab_norm: Any
    # Seconds per FLOP at peak x MFU and support flags, per accelerator, model and the
    # precision of one group (kgp + code, kgp = (gpu * model_count + model) * 6): the layers'
    # time is the sum of their groups' (attention + MLP + MoE, in that order), the attention
    # context's is the attention's; per accelerator and edge key (kge) for the head. (The
    # attention's and the MLP's support flags are the same values: the compiled formula reads
    # each table with one key.)
    t_attn: Any
    t_mlp: Any
    t_moe: Any  # x the active share of the experts
    t_seq: Any
    t_head: Any
    sup_attn: Any
    sup_mlp: Any
    sup_moe: Any  # 1 for a model without experts
    sup_edge: Any
    sup_norm: Any  # gpu * 6 + norm precision
    deg_layer: Any  # int bits, 1 all-FP8, 2 all-FP32; keyed by kl / eh / norm precision
    deg_edge: Any
    deg_norm: Any

    def gpu(self, name: str) -> int:
        """The index of an accelerator by name."""
        return _index(self.gpu_names, name, "accelerator")

    def model(self, name: str) -> int:
        """The index of a model preset by name."""
        return _index(self.model_names, name, "model")


def _index(names: tuple[str, ...], name: str, what: str) -> int:
    try:
        return names.index(name)
    except ValueError:
        raise KeyError(f"unknown {what} {name!r}; known: {', '.join(names)}") from None


def load_json(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((resources.files("twin.kernel") / "data" / name).read_text())
    return data


def model_params(m: dict[str, Any]) -> dict[str, float]:
    """Parameters per layer group from a model's published config."""
    h, layers, vocab = m["hidden"], m["layers"], m["vocab"]
    head_dim = h // m["heads"]
    kv = m["kv_heads"] * head_dim
    attn = h * h + 2 * h * kv + h * h + (h + 2 * kv if m["qkv_bias"] else 0)
    mlp = 3 * h * m["intermediate"]
    experts = m["experts"]
    return {
        "embedding": float(vocab * h),
        "attention": float(layers * attn),
        "mlp": float(0 if experts else layers * mlp),
        "moe": float(layers * (experts * mlp + h * experts)) if experts else 0.0,
        "norm": float(2 * layers * h + h),
        "head": float(0 if m["tied_embeddings"] else vocab * h),
    }


def _state(params: list[tuple[float, int]], mode: int, opt: int, zero: int) -> tuple[float, float]:
    """(A, B): bytes of a part's parameter state kept whole and sharded by ZeRO over dp."""
    w = sum(p * BYTES[c] for p, c in params)
    if mode == 1:
        return w, 0.0
    g = sum(p * GRAD_BYTES[c] for p, c in params)
    s = sum(p * (OPTIMIZER_BYTES[opt] + MASTER_BYTES[c]) for p, c in params)
    return [(w + g + s, 0.0), (w + g, s), (w, g + s), (0.0, w + g + s)][zero]


def _states(part_params: list[list[tuple[float, int]]]) -> tuple[np.ndarray, np.ndarray]:
    """Per part, per regime (`formula.REGIMES`: training by optimizer and ZeRO stage, then
    serving, whose state neither changes)."""
    rows = [
        row
        for params in part_params
        for row in [*(_state(params, 0, opt, zero) for opt in range(3) for zero in range(4)),
                    _state(params, 1, 0, 0)]
    ]  # fmt: skip
    assert len(rows) == len(part_params) * REGIMES
    a, b = zip(*rows, strict=True)
    return np.array(a), np.array(b)


def _inverse_reference(
    gpus: list[dict[str, Any]], models: list[dict[str, Any]], params: list[dict[str, float]]
) -> list[float]:
    """Per model and mode: 3600 / tokens per dollar of the reference (H100, BF16; training at
    REFERENCE_MFU, serving bandwidth-bound at batch REFERENCE_DECODE_BATCH)."""
    ref = next(g for g in gpus if g["name"] == REFERENCE_GPU)
    out = []
    for m, p in zip(models, params, strict=True):
        total = sum(p.values())
        active = total - p["moe"] + (p["moe"] * m["top_k"] / m["experts"] if m["experts"] else 0.0)
        train_tok_s = ref["tflops"]["bf16"] * 1e12 * REFERENCE_MFU / (6 * active)
        decode_tok_s = REFERENCE_DECODE_BATCH * ref["mem_bw_gb_s"] * 1e9 * BW_EFF / (2 * total)
        out += [
            3600.0 / (tok_s * 3600 / ref["price_usd_per_gpu_h"])
            for tok_s in (train_tok_s, decode_tok_s)
        ]
    return out


def _per_accelerator(
    models: list[dict[str, Any]],
    params: list[dict[str, float]],
    pk: list[list[float]],
    sup: list[list[float]],
) -> dict[str, list[float]]:
    """Seconds per FLOP-token of each layer group, attention context and head; support flags
    (keyed as `Tables` says)."""
    out: dict[str, list[float]] = {name: [] for name in (
        "t_attn", "t_mlp", "t_moe", "t_seq", "sup_attn", "sup_mlp", "sup_moe", "t_head",
        "sup_edge")}  # fmt: skip
    for k, ok in zip(pk, sup, strict=True):
        for m, p in zip(models, params, strict=True):
            moe = m["experts"] > 0
            act = m["top_k"] / m["experts"] if moe else 0.0
            lh = float(m["layers"] * m["hidden"])
            for c in range(6):
                out["t_attn"].append(p["attention"] / k[c])
                out["t_mlp"].append(p["mlp"] / k[c])
                out["t_moe"].append(p["moe"] * act / k[c])
                out["t_seq"].append(lh / k[c])
                out["sup_attn"].append(ok[c])
                out["sup_mlp"].append(ok[c])
                out["sup_moe"].append(ok[c] if moe else 1.0)
            for e, h in P2:
                out["t_head"].append(p["head"] / k[h])
                out["sup_edge"].append(ok[e] * ok[h])
    return out


P3 = [(a, m, x) for a in range(6) for m in range(6) for x in range(6)]
P2 = [(e, h) for e in range(6) for h in range(6)]


def _deg(codes: list[int]) -> int:
    """Bit 1: every group FP8; bit 2: every group FP32 (ANDed over the parts of a plan)."""
    return 1 if all(c == FP8 for c in codes) else 2 if all(c == FP32 for c in codes) else 0


@cache
def default_tables() -> Tables:
    """Tables built from the shipped accelerator and model data."""
    return build(load_json("accelerators.json")["accelerators"], load_json("models.json")["models"])


def build(gpus: list[dict[str, Any]], models: list[dict[str, Any]]) -> Tables:
    """Precompute every table the formula reads from accelerator and model descriptions."""
    peak = [[(g["tflops"][p] or 0.0) * 1e12 for p in PRECISIONS] for g in gpus]
    sup = [[1.0 if x > 0 else 0.0 for x in row] for row in peak]
    pk = [[max(x, 1.0) * MFU for x in row] for row in peak]
    params = [model_params(m) for m in models]
    stab = STABILITY
    p3, p2 = P3, P2
    layer_parts: list[list[tuple[float, int]]] = []
    edge_e: list[list[tuple[float, int]]] = []
    edge_h: list[list[tuple[float, int]]] = []
    norm_parts: list[list[tuple[float, int]]] = []
    layer_rows: list[tuple[float, ...]] = []  # g, f, f_seq, q, q_seq, stab train, stab infer
    edge_rows: list[tuple[float, ...]] = []  # f_head, q_head, stab train, stab infer
    norm_rows: list[tuple[float, ...]] = []  # stab train, stab infer
    deg_layer, kv_bytes = [], []
    for m, p in zip(models, params, strict=True):
        moe = m["experts"] > 0
        act = m["top_k"] / m["experts"] if moe else 0.0
        lh = float(m["layers"] * m["hidden"])
        head_dim = m["hidden"] // m["heads"]
        kv_bytes += [2.0 * head_dim * BYTES[c] for c in range(6)]
        for a, mm, x in p3:
            parts = [(p["attention"], a), (p["mlp"], mm), (p["moe"], x)]
            layer_parts.append(parts)
            layer_rows.append((
                sum(q * GRAD_BYTES[c] for q, c in parts),
                p["attention"] + p["mlp"] + p["moe"] * act,
                lh,
                p["attention"] * POWER_FACTOR[a] + p["mlp"] * POWER_FACTOR[mm]
                + p["moe"] * act * POWER_FACTOR[x],
                lh * POWER_FACTOR[a],
                *(s["attention"][a] * s["mlp"][mm] * (s["moe"][x] if moe else 1.0)
                  for s in (stab["train"], stab["infer"])),
            ))  # fmt: skip
            deg_layer.append(_deg([a, mm, x] if moe else [a, mm]))
        for e, h in p2:
            edge_e.append([(p["embedding"], e)])
            edge_h.append([(p["head"], h)])
            edge_rows.append((
                p["head"],
                p["head"] * POWER_FACTOR[h],
                *(s["embedding"][e] * s["head"][h] for s in (stab["train"], stab["infer"])),
            ))  # fmt: skip
        for c in range(6):
            norm_parts.append([(p["norm"], c)])
            norm_rows.append((stab["train"]["norm"][c], stab["infer"]["norm"][c]))
    per_gpu = _per_accelerator(models, params, pk, sup)
    a_layer, b_layer = _states(layer_parts)
    a_emb, b_emb = _states(edge_e)
    a_head, b_head = _states(edge_h)
    a_norm, b_norm = _states(norm_parts)
    inv_ref = _inverse_reference(gpus, models, params)

    def col(rows: list[dict[str, Any]], key: str, scale: float = 1.0) -> np.ndarray:
        return np.array([r[key] * scale for r in rows], dtype=np.float64)

    def arr(values: list[float]) -> np.ndarray:
        return np.array(values, dtype=np.float64)

    def column(rows: list[tuple[float, ...]], i: int) -> np.ndarray:
        """Column i of per-part rows."""
        return arr([row[i] for row in rows])

    def per_mode(rows: list[tuple[float, ...]], i: int) -> np.ndarray:
        """Columns i (training) and i + 1 (serving) of per-part rows: part key * 2 + mode."""
        return arr([row[i + mode] for row in rows for mode in (0, 1)])

    return Tables(
        gpu_names=tuple(g["name"] for g in gpus),
        model_names=tuple(m["name"] for m in models),
        model_count=len(models),
        edge_stride=len(models) * 36,
        usable_bytes=col(gpus, "memory_gib", 2.0**30 * (1.0 - HEADROOM)),
        inv_bw=arr([1.0 / (g["mem_bw_gb_s"] * 1e9 * BW_EFF) for g in gpus]),
        link_b_s=col(gpus, "link_gb_s", 1e9),
        tdp_w=col(gpus, "tdp_w"),
        price_usd_h=col(gpus, "price_usd_per_gpu_h"),
        layers=col(models, "layers"),
        hidden=col(models, "hidden"),
        vocab=col(models, "vocab"),
        kv_heads=col(models, "kv_heads"),
        kv_bytes=arr(kv_bytes),
        inv_ref_tokens_per_usd_s=arr(inv_ref),
        flop_factor=arr([6.0, 8.0, 2.0, 2.0]),
        act_per_layer=arr([34.0, 2.0]),
        act_extra=arr([0.0, 34.0]),
        a_layer=a_layer,
        b_layer=b_layer,
        a_norm=a_norm,
        b_norm=b_norm,
        a_emb=a_emb,
        b_emb=b_emb,
        a_head=a_head,
        b_head=b_head,
        g_layer=column(layer_rows, 0),
        f_layer=column(layer_rows, 1),
        f_seq=column(layer_rows, 2),
        q_layer=column(layer_rows, 3),
        q_seq=column(layer_rows, 4),
        stab_layer=per_mode(layer_rows, 5),
        f_head=column(edge_rows, 0),
        q_head=column(edge_rows, 1),
        stab_edge=per_mode(edge_rows, 2),
        stab_norm=per_mode(norm_rows, 0),
        **{name: arr(values) for name, values in per_gpu.items()},
        sup_norm=arr([x for row in sup for x in row]),
        deg_layer=np.array(deg_layer, dtype=np.int64),
        deg_edge=np.array([_deg([e, h]) for e, h in p2], dtype=np.int64),
        deg_norm=np.array([_deg([c]) for c in range(6)], dtype=np.int64),
    )
