"""The compose stacks on a real Docker Engine, model server included: build times and image
sizes, then the full stack (three agents, one on SmolLM2 in the `llm` container), the six-team
stack and openb's, each played to its end. Prints readable lines, then one JSON line.

    python -m bench.compose [--cold]      # from the repository root; make bench runs it

`--cold` builds both images without the build cache (the figures docs/compose.md quotes);
otherwise a build reuses what the daemon has cached. The daemon is the one that answers, or a
`dockerd` started for the run and stopped by its PID (tests/engine.py), with the base image
compose/base-image.sh makes where python:3.11-slim-bookworm cannot be pulled."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from tests.engine import Engine, NoEngineError, Project, checkout_copy, engine

STACKS = {  # name -> compose files, as docs/compose.md runs them
    "full": ("docker-compose.yml",),
    "more": ("docker-compose.yml", "docker-compose.more.yml"),
    "openb": ("docker-compose.openb.yml",),
}


def image_mb(docker: Engine, name: str) -> float:
    done = docker.docker("image", "inspect", "--format", "{{.Size}}", name)
    return round(int(done.stdout) / 1e6, 1) if done.returncode == 0 else float("nan")


def agent_reports(project: Project) -> dict[str, dict[str, Any]]:
    """Each agent's closing report: the last JSON line it printed."""
    reports = {}
    for line in project.must("logs", "--no-log-prefix", "--no-color").splitlines():
        if line.startswith('{"tenant"'):
            report = json.loads(line)
            reports[report["tenant"]] = report
    return reports


def play(project: Project, files: tuple[str, ...]) -> dict[str, Any]:
    project.compose("down", "--remove-orphans", timeout_s=120)  # the last stack's containers
    project.files = files
    start = time.perf_counter()
    project.must("up", timeout_s=1800)
    wall_s = time.perf_counter() - start
    reports = agent_reports(project)
    figures: dict[str, Any] = {
        "wall_s": round(wall_s, 1),
        "exit_codes": project.exit_codes(),
        "agents": len(reports),
        "rounds": max((r["rounds"] for r in reports.values()), default=0),
        "end_reasons": sorted({r["end_reason"] for r in reports.values()}),
        "defaulted_rounds": sum(r["defaulted_rounds"] for r in reports.values()),
    }
    llm = [r["llm"] for r in reports.values() if "llm" in r]
    if llm:
        figures["llm"] = {k: llm[0][k] for k in (
            "calls", "decisions", "valid_first_try", "valid_after_retry", "fallbacks",
            "latency_ms_p50", "latency_ms_max", "completion_tokens")}  # fmt: skip
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compose", description=__doc__)
    p.add_argument("--cold", action="store_true", help="build without the build cache")
    args = p.parse_args(argv)
    try:
        with engine() as docker:
            project = Project(docker, checkout_copy(), STACKS["full"])
            try:
                cache = ["--no-cache"] if args.cold else []
                built = {}
                for service, image in (("gateway", "cluster-twin"), ("llm", "cluster-twin-llm")):
                    start = time.perf_counter()
                    project.must("build", *cache, service, timeout_s=3600)
                    built[image] = round(time.perf_counter() - start, 1)
                figures: dict[str, Any] = {
                    "base_image": docker.base_image,
                    "base_image_mb": image_mb(docker, docker.base_image),
                    "cold": args.cold,
                    **{f"{k.replace('-', '_')}_build_s": v for k, v in built.items()},
                    **{f"{k.replace('-', '_')}_image_mb": image_mb(docker, k) for k in built},
                }
                for name, files in STACKS.items():
                    figures[name] = play(project, files)
            finally:
                project.down()
    except NoEngineError as exc:
        print(f"compose: no Docker Engine here: {exc}", file=sys.stderr)
        return 2
    print(f"base {figures['base_image']}: {figures['base_image_mb']} MB")
    how = "cold" if args.cold else "cache allowed"
    for image in ("cluster_twin", "cluster_twin_llm"):
        built_s, size_mb = figures[f"{image}_build_s"], figures[f"{image}_image_mb"]
        print(f"{image}: built in {built_s} s ({how}), {size_mb} MB")
    for name in STACKS:
        stack = figures[name]
        codes = sorted(set(stack["exit_codes"].values()))
        ended = "/".join(stack["end_reasons"])
        line = (f"{name}: {stack['agents']} agents, {stack['rounds']} rounds in "
                f"{stack['wall_s']} s, ended {ended}, exit codes {codes}")  # fmt: skip
        if "llm" in stack:
            llm = stack["llm"]
            line += (f"; the model decided {llm['decisions']} rounds ({llm['valid_first_try']} of "
                     f"{llm['calls']} answers valid first try, {llm['fallbacks']} fallbacks, p50 "
                     f"{llm['latency_ms_p50'] / 1000:.1f} s)")  # fmt: skip
        print(line)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
