"""`twin kernel`: evaluate one allocation plan, or list what the kernel knows."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING, Any

from twin.cli.arg_types import at_least_one, non_negative
from twin.errors import ConfigError
from twin.schema.vocabulary import LAYER_GROUPS, MODES, OPTIMIZERS, PRECISIONS

if TYPE_CHECKING:
    from rich.console import Console

    from twin.kernel import Plan

GROUPS = LAYER_GROUPS[1:]  # the groups a precision can name ("default" covers the rest)

GIB = 2.0**30


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kernel = sub.add_parser("kernel", help="evaluate allocation plans with the kernel")
    ksub = kernel.add_subparsers(dest="kernel_command", required=True)
    ev = ksub.add_parser("evaluate", help="one plan's memory, speed, power, stability, cost, score")
    ev.add_argument("--model", required=True, help="model preset (twin kernel catalog)")
    ev.add_argument("--gpu", required=True, help="accelerator (twin kernel catalog)")
    ev.add_argument("--gpus", type=at_least_one, required=True, help="number of GPUs")
    ev.add_argument(
        "--precision",
        default="bf16",
        help="a precision for all groups and/or GROUP=PREC pairs, e.g. bf16,mlp=fp8; "
        f"groups: {', '.join(GROUPS)}; precisions: {', '.join(PRECISIONS)}",
    )
    ev.add_argument("--tp", type=at_least_one, default=1, help="tensor parallel degree")
    ev.add_argument("--pp", type=at_least_one, default=1, help="pipeline parallel degree")
    ev.add_argument("--mode", choices=MODES, default="train")
    ev.add_argument("--micro-batch", type=at_least_one, default=1, help="sequences per micro-batch")
    ev.add_argument("--seq-len", type=at_least_one, default=4096)
    ev.add_argument("--micro-batches", type=at_least_one, default=8, help="micro-batches per step")
    ev.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    ev.add_argument("--zero", type=int, default=0, choices=range(4), help="ZeRO stage")
    ev.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    ev.add_argument("--power-cap-w", type=non_negative, default=0.0, help="per-GPU power cap")
    ev.add_argument("--node-power-cap-w", type=non_negative, default=0.0, help="per 8-GPU node")
    ev.add_argument("--tokens", type=non_negative, default=0.0, help="job size in tokens")
    ev.add_argument("--json", action="store_true", help="print the verdict as JSON")
    ev.set_defaults(func=evaluate_command)
    cat = ksub.add_parser("catalog", help="accelerators and model presets")
    cat.set_defaults(func=catalog_command)


def parse_precision(spec: str) -> dict[str, str]:
    """`bf16,mlp=fp8` -> {"default": "bf16", "mlp": "fp8"}; unknown names name the choices."""
    out = {"default": "bf16"}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        group, sep, prec = part.rpartition("=")
        if prec not in PRECISIONS:
            allowed = ", ".join(PRECISIONS)
            raise ConfigError(f"--precision: {prec!r} is not a precision; allowed: {allowed}")
        if sep and group not in GROUPS:
            allowed = ", ".join(GROUPS)
            raise ConfigError(f"--precision: {group!r} is not a layer group; allowed: {allowed}")
        out[group if sep else "default"] = prec
    return out


def build_plan(args: argparse.Namespace) -> Plan:
    """The plan the flags describe, through the same encoding the sim uses."""
    from pydantic import ValidationError

    from twin.kernel import default_tables
    from twin.schema.scenario import PlanSpec
    from twin.sim import encode
    from twin.sim.scenarios import describe

    t = default_tables()
    try:
        model, gpu = t.model(args.model), t.gpu(args.gpu)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    cap = args.power_cap_w
    if args.node_power_cap_w > 0:
        per_gpu = args.node_power_cap_w / min(max(args.gpus, 1), 8)
        cap = per_gpu if cap <= 0 else min(cap, per_gpu)
    try:
        spec = PlanSpec.model_validate(
            {
                "precision": parse_precision(args.precision),
                "tp": args.tp,
                "pp": args.pp,
                "micro_batch": args.micro_batch,
                "seq_len": args.seq_len,
                "micro_batches": args.micro_batches,
                "optimizer": args.optimizer,
                "zero": args.zero,
                "checkpointing": args.checkpointing,
                "power_cap_w": cap,
            }
        )
        return encode.plan(model, gpu, args.gpus, args.mode, spec, tokens=args.tokens)
    except ValidationError as exc:
        raise ConfigError(f"invalid plan: {describe(exc)}") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _group_params(model: str) -> dict[str, float]:
    from twin.kernel.tables import load_json, model_params

    return model_params(next(m for m in load_json("models.json")["models"] if m["name"] == model))


def evaluate_command(args: argparse.Namespace) -> int:
    import orjson
    from rich.console import Console

    from twin.kernel import default_tables, evaluate_one, reason_names

    plan = build_plan(args)
    v = evaluate_one(plan)
    t = default_tables()
    tdp = float(t.tdp_w[plan.gpu])
    groups = _group_params(args.model)
    precision = {
        g: PRECISIONS[c] for g, c in zip(GROUPS, plan.precision, strict=True) if groups[g] > 0
    }
    verdict = {
        "model": args.model,
        "gpu": args.gpu,
        "gpus": int(plan.n_gpus),
        "tp": int(plan.tp),
        "pp": int(plan.pp),
        "dp": int(plan.n_gpus // (plan.tp * plan.pp)),
        "mode": args.mode,
        "precision": precision,
        "feasible": v.feasible,
        "memory_gib_per_gpu": v.mem_bytes / GIB,
        "usable_gib_per_gpu": float(t.usable_bytes[plan.gpu]) / GIB,
        "step_s": v.step_s if math.isfinite(v.step_s) else None,
        "tokens_per_s": v.tokens_per_s,
        "power_w_per_gpu": v.power_w,
        "power_cap_w": min(plan.power_cap_w, tdp) if plan.power_cap_w > 0 else tdp,
        "throttle": v.throttle,
        "stability": v.stability,
        "usd_per_h": v.usd_per_h,
        "job_s": v.job_s if plan.tokens else None,
        "job_usd": v.job_usd if plan.tokens else None,
        "score": v.score,
        "reasons": reason_names(v.reasons),
    }
    if args.json:
        sys.stdout.write(orjson.dumps(verdict, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_verdict(verdict, Console())
    return 0


def _print_verdict(v: dict[str, Any], console: Console) -> None:
    from twin.cli.render import Table

    values = list(v["precision"].values())
    common = max(set(values), key=values.count)
    others = ", ".join(f"{g}={p}" for g, p in v["precision"].items() if p != common)
    title = (
        f"{v['model']} on {v['gpus']} x {v['gpu']}  (tp {v['tp']} · pp {v['pp']} · dp {v['dp']}, "
        f"{v['mode']}, {common}{' except ' + others if others else ''})"
    )
    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    mem, usable = v["memory_gib_per_gpu"], v["usable_gib_per_gpu"]
    fit = "" if mem <= usable else "  ✗ does not fit"
    table.add_row("memory", f"{mem:,.1f} GiB per GPU of {usable:,.1f} GiB usable{fit}")
    step = v["step_s"]
    table.add_row(
        "speed",
        "unsupported precision"
        if step is None
        else f"step {step:,.3f} s · {v['tokens_per_s']:,.0f} tokens/s",
    )
    throttle = v["throttle"]
    table.add_row(
        "power",
        f"{v['power_w_per_gpu']:,.0f} W per GPU (cap {v['power_cap_w']:,.0f} W)"
        + (f", throttled to {throttle:.0%} speed" if throttle < 1 else ", no throttling"),
    )
    stab = v["stability"]
    table.add_row("stability", f"{stab:.3f} ({'stable' if stab >= 0.5 else 'diverges'})")
    cost = f"${v['usd_per_h']:,.2f}/h"
    if v["job_s"] is not None:
        cost += f" · job {v['job_s'] / 3600:,.1f} h, ${v['job_usd']:,.0f}"
    table.add_row("cost", cost)
    reasons = ", ".join(v["reasons"])
    table.add_row("score", f"{v['score']:.3f}" + (f"  ({reasons})" if reasons else ""))
    console.print(table)


def catalog_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from twin.cli.render import Table
    from twin.kernel.tables import load_json, model_params

    console = Console()
    gpus = Table(title="accelerators (dense TFLOPS)")
    for col in ("name", "memory GiB", "TB/s", "TDP W", "$/GPU-h", *PRECISIONS):
        gpus.add_column(col, justify="left" if col == "name" else "right")
    for g in load_json("accelerators.json")["accelerators"]:
        rates = [("-" if g["tflops"][p] is None else f"{g['tflops'][p]:,.0f}") for p in PRECISIONS]
        gpus.add_row(
            g["name"],
            str(g["memory_gib"]),
            f"{g['mem_bw_gb_s'] / 1000:.2f}",
            str(g["tdp_w"]),
            f"{g['price_usd_per_gpu_h']:.2f}",
            *rates,
        )
    console.print(gpus)
    models = Table(title="model presets")
    for col in ("name", "params (B)", "layers", "hidden", "heads / kv", "experts"):
        models.add_column(col, justify="left" if col == "name" else "right")
    for m in load_json("models.json")["models"]:
        total = sum(model_params(m).values()) / 1e9
        experts = f"{m['experts']} (top {m['top_k']})" if m["experts"] else "-"
        models.add_row(
            m["name"],
            f"{total:.2f}",
            str(m["layers"]),
            str(m["hidden"]),
            f"{m['heads']} / {m['kv_heads']}",
            experts,
        )
    console.print(models)
    return 0
