"""`twin trace-scenario`: write a cluster scenario whose tenants play a real trace."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel

    from twin.replay.run import ReplayOptions
    from twin.schema.scenario import ClusterScenario
    from twin.schema.trace_workload import TraceWorkload

from twin.cli.arg_types import at_least_zero, non_negative, out_file, positive
from twin.cli.trace_args import (
    add_trace_options,
    add_window_options,
    trace_file,
    trace_options,
)
from twin.schema.vocabulary import CALIBRATION_FILE, PLACEMENTS

CLOUD = "NAME:GPU_TYPE:MAX_GPUS:USD_PER_GPU_H[:PROVISION_S[:SPEED]]"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser(
        "trace-scenario",
        help="write a scenario whose tenants play a trace on its cluster (beside cloud pools)",
    )
    add_trace_options(sp)
    add_window_options(sp)
    sp.add_argument(
        "--params",
        type=trace_file,
        help=f"scheduler model and cluster share: a {CALIBRATION_FILE} or its params",
    )
    sp.add_argument("--placement", choices=PLACEMENTS, help="node choice (default: the params')")
    sp.add_argument("--name", required=True, help="the scenario's name")
    sp.add_argument("--description", default="")
    sp.add_argument(
        "--tenants-by",
        default="tenant",
        help="the column rows map to tenants by: 'tenant' (the format's own) or a field the "
        "format keeps (openb: qos)",
    )
    sp.add_argument(
        "--top", type=at_least_zero, default=4, help="tenants named, by GPU-hours (default 4)"
    )
    sp.add_argument("--other", default="other", help="the tenant that plays the remaining rows")
    sp.add_argument("--cloud-pool", action="append", default=[], metavar=CLOUD,
                    help="a pool tenants may provision (repeatable); provisioning delay "
                    "lognormal around PROVISION_S (default 600)")  # fmt: skip
    sp.add_argument("--decision-interval-s", type=positive, default=900.0)
    sp.add_argument("--horizon-h", type=positive, help="end the episode then (default: drained)")
    sp.add_argument("--tenant-policy", default="static", help="in-process policy (default static)")
    sp.add_argument(
        "--budget-usd", type=non_negative, help="each tenant's budget (default unlimited)"
    )
    sp.add_argument("--value-usd-per-gpu-h", type=non_negative, default=4.0)
    sp.add_argument("--sla-usd-per-job-h", type=non_negative, default=0.0)
    sp.add_argument(
        "--out", type=out_file, help="the YAML file to write (default: standard output)"
    )
    sp.set_defaults(func=trace_scenario_command)


def cloud_pool(spec: str) -> dict[str, Any]:
    """`NAME:GPU_TYPE:MAX_GPUS:USD_PER_GPU_H[:PROVISION_S[:SPEED]]` as a pool's raw config."""
    from twin.errors import ConfigError

    parts = spec.split(":")
    if not 4 <= len(parts) <= 6:
        raise ConfigError(f"--cloud-pool {spec!r}: expected {CLOUD}")
    try:
        name, gpu_type, gpus, price = parts[0], parts[1], int(parts[2]), float(parts[3])
        delay_s = float(parts[4]) if len(parts) > 4 else 600.0
        speed = float(parts[5]) if len(parts) > 5 else 1.0
    except ValueError:
        why = f"--cloud-pool {spec!r}: expected {CLOUD} (numbers where named)"
        raise ConfigError(why) from None
    return {
        "name": name,
        "gpu_type": gpu_type,
        "max_gpus": gpus,
        "price_usd_per_gpu_h": price,
        "speed": speed,
        "provision_delay_s": {"dist": "lognormal", "median": delay_s, "sigma": 0.4},
    }


TAGS = ("kind", "dist", "process")  # what a discriminated union is told apart by: always kept


def concise(model: BaseModel) -> dict[str, Any]:
    """A model's JSON form without the fields left at their defaults (tags kept)."""
    from pydantic import BaseModel, TypeAdapter

    out: dict[str, Any] = {}
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if name not in TAGS and value == info.get_default(call_default_factory=True):
            continue
        if isinstance(value, BaseModel):
            out[name] = concise(value)
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            out[name] = [concise(v) for v in value]
        else:
            out[name] = TypeAdapter(Any).dump_python(value, mode="json")
    return out


def trace_scenario_command(args: argparse.Namespace) -> int:
    import yaml

    from twin.replay.workload import reading
    from twin.sim.job_sources import portable

    options = trace_options(args)
    if args.placement:
        options = replace(
            options, params=options.params.model_copy(update={"placement": args.placement})
        )
    workload = trace_workload(args, portable(str(args.trace)))
    options = replace(options, fmt=reading(workload).fmt, window=reading(workload).window)
    scenario = _scenario(args, options, workload)
    text = yaml.safe_dump(concise(scenario), sort_keys=False, width=100)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
        names = ", ".join(t.name for t in scenario.tenants)
        print(f"wrote {args.out}: {len(scenario.tenants)} tenants ({names})")
    else:
        sys.stdout.write(text)
    return 0


def trace_workload(args: argparse.Namespace, path: str) -> TraceWorkload:
    """The scenario's `trace:` from the command line; ConfigError says what is wrong."""
    from pydantic import ValidationError

    from twin.errors import ConfigError
    from twin.schema.trace_workload import TraceWorkload
    from twin.sim.scenarios import describe

    try:
        return TraceWorkload(
            path=path,
            format=args.format,
            columns=args.columns,
            include_cpu=args.include_cpu,
            start_h=args.start_h,
            end_h=args.end_h,
            max_jobs=args.max_jobs,
            skip_bad=args.skip_bad,
            tenant_by=args.tenants_by,
            other=args.other,
        )
    except ValidationError as exc:
        raise ConfigError(f"trace-scenario: {describe(exc)}") from None


def _scenario(
    args: argparse.Namespace, options: ReplayOptions, workload: TraceWorkload
) -> ClusterScenario:
    from twin.replay.tenant_scenario import Extras, TenantDefaults, build

    return build(
        workload,
        options,
        args.top,
        Extras(
            name=args.name,
            description=args.description,
            pools=[cloud_pool(s) for s in args.cloud_pool],
            decisions={"interval_s": args.decision_interval_s, "triggers": []},
            horizon_s=None if args.horizon_h is None else args.horizon_h * 3600.0,
        ),
        TenantDefaults(
            args.tenant_policy, args.budget_usd, args.value_usd_per_gpu_h, args.sla_usd_per_job_h
        ),
    )
