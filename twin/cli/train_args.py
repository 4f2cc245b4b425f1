"""What the training commands (`twin train`, on a scenario or a family) read from their flags
alike: the output directory, the policy file to evaluate, and the search's settings."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from twin.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from twin.rl.training import CurvePoint, Trained, TrainSettings
    from twin_agents.learned import PolicyFile

    Search = Callable[[TrainSettings, Callable[[CurvePoint], None]], Trained]


def output_dir(args: argparse.Namespace) -> Path | None:
    """`--out`, created (None without it)."""
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    return out


def policy_to_evaluate(args: argparse.Namespace) -> PolicyFile | None:
    """The policy file `--evaluate` names (None without it); a bad file is a ConfigError."""
    return _policy_file(args.evaluate)


def _policy_file(path: str | None) -> PolicyFile | None:
    from twin_agents.learned import PolicyFile

    if not path:
        return None
    try:
        return PolicyFile.load(path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def settings(args: argparse.Namespace, workers: int) -> TrainSettings:
    """The search's settings from the flags."""
    from twin.rl.cem import CemSettings
    from twin.rl.training import TrainSettings
    from twin.schema.vocabulary import MECHANISM_TRAITS

    if args.trading_only and not MECHANISM_TRAITS[args.mechanism].clears_held:
        raise ConfigError(f"--trading-only: the {args.mechanism} mechanism does not clear held "
                          "GPUs, so there are no trading parameters to search (call_market "
                          "does)")  # fmt: skip
    return TrainSettings(
        generations=args.generations, seeds_per_generation=args.seeds_per_generation,
        validation_seeds=args.validation_seeds, held_out_seeds=args.held_out,
        cem=CemSettings(population=args.population, elite=args.elite), seed=args.seed,
        mechanism=args.mechanism, workers=workers, start=_policy_file(args.start),
        trading_only=args.trading_only,
    )  # fmt: skip


def trained_or_loaded(args: argparse.Namespace, workers: int, out: Path | None, *, name: str,
                      on: str, what: str, search: Search) -> PolicyFile:  # fmt: skip
    """The policy `--evaluate` names, or the one `search` trains on `name` (saying so: `on`
    says where, `what` each candidate plays), saved with its learning curve under `out`."""
    from twin.cli.curves import POLICY_FILE, progress, write_curve

    loaded = policy_to_evaluate(args)
    if loaded is not None:
        return loaded
    how = settings(args, workers)
    print(f"training on {on}: {how.generations} generations of {how.cem.population} "
          f"candidates x {how.seeds_per_generation} {what}, {workers} worker(s)",
          flush=True)  # fmt: skip
    trained = search(how, progress(how.generations))
    assert out is not None
    trained.policy.save(out / POLICY_FILE)
    write_curve(out, trained.curve, name)
    return trained.policy
