"""An arena's directory: `arena.json` (what ran: versions, scenario hashes, seeds, agents and
prompt hashes), `runs/<key>.json` (one row per finished session, so a restart skips it), and
what is drawn from them: `leaderboard.parquet`, `sessions.parquet` and `leaderboard.html`.

Two arenas merge when they played the same scenarios on the same seeds and their baselines
agree; anything else is refused with what differs.
"""

from __future__ import annotations

import math
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from twin.arena import board
from twin.errors import ConfigError
from twin.sweep.execute import RUNS_DIR, save

Row = dict[str, Any]
MANIFEST_FILE = "arena.json"
LEADERBOARD_FILE = "leaderboard.parquet"
SESSIONS_FILE = "sessions.parquet"
MIRROR_FILE = "mirror.parquet"  # every tenant one agent: welfare, trade gain, score
CROSS_FILE = "cross.parquet"  # the cross-play matrix
PAGE_FILE = "leaderboard.html"
BASELINE_TOLERANCE_USD = 1e-6


def twin_version() -> str:
    try:
        return version("cluster-twin")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def read_manifest(out: Path) -> dict[str, Any] | None:
    path = out / MANIFEST_FILE
    if not path.exists():
        return None
    try:
        found: dict[str, Any] = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not an arena manifest ({exc})") from None
    return found


def write_json(path: Path, body: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
    tmp.replace(path)


def identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a directory's sessions depend on, past the seeds (which may grow on a resume)."""
    return {"scenarios": manifest["scenarios"], "agents": manifest["agents"],
            "mechanisms": mechanisms(manifest),
            "regimes": manifest.get("regimes", ["rotation"]),
            "trade_gain": manifest.get("trade_gain", False)}  # fmt: skip


def mechanisms(manifest: dict[str, Any]) -> list[str]:
    """The mechanisms an arena played (one, under its old name, in an arena from before)."""
    return list(manifest.get("mechanisms") or [manifest["mechanism"]])


def rows(out: Path) -> list[Row]:
    """Every finished session's row, by key."""
    found = []
    for path in sorted((out / RUNS_DIR).glob("*.json")):
        try:
            row = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            row = None
            why = str(exc)
        else:
            why = "not a session row"
        if not isinstance(row, dict) or not {"key", "kind", "seed", "tenants"} <= row.keys():
            raise ConfigError(f"{path}: {why}; delete it to play that session again")
        found.append(row)
    return found


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


class Boards(NamedTuple):
    """What an arena's rows come to: the rotation's leaderboard, the mirror, the cross-play."""

    ranked: list[Row]
    mirrored: list[Row]
    crossed: list[Row]


def preload() -> None:
    """What writing the boards imports (pyarrow, pandas and the page)."""
    import twin.arena.page  # noqa: F401
    from twin.sweep.execute import preload_results

    preload_results()


def write_outputs(out: Path, manifest: dict[str, Any], found: list[Row]) -> Boards:
    """The leaderboard, the mirror and cross-play tables, the sessions' table and the page from
    the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from twin.arena.page import render

    ranked = board.leaderboard(found)
    mirrored, crossed = board.mirror(found), board.cross(found)
    if ranked:  # a mirror-only arena has no rotation to rank: no empty table
        pq.write_table(pa.Table.from_pylist(ranked), out / LEADERBOARD_FILE, compression="zstd")
    table = pa.Table.from_pylist([{k: _clean(v) for k, v in r.items()} for r in board.tidy(found)])
    pq.write_table(table, out / SESSIONS_FILE, compression="zstd")
    if mirrored:
        shares = [{**r, "surplus_shares": orjson.dumps(r["surplus_shares"]).decode()}
                  for r in mirrored]  # fmt: skip
        pq.write_table(pa.Table.from_pylist(shares), out / MIRROR_FILE, compression="zstd")
    if crossed:
        pq.write_table(pa.Table.from_pylist(crossed), out / CROSS_FILE, compression="zstd")
    (out / PAGE_FILE).write_text(render(ranked, manifest, mirrored, crossed), encoding="utf-8")
    return Boards(ranked, mirrored, crossed)


def written(out: Path, boards: Boards) -> str:
    """The files an arena's outputs are, as a closing line names them: the page with its
    directory, then every table it wrote."""
    tables = [name for name, rows in ((LEADERBOARD_FILE, boards.ranked), (SESSIONS_FILE, True),
                                      (MIRROR_FILE, boards.mirrored), (CROSS_FILE, boards.crossed))
              if rows]  # fmt: skip
    return f"wrote {out / PAGE_FILE}, " + ", ".join(tables[:-1]) + f" and {tables[-1]}"


def merge(a: Path, b: Path, out: Path) -> tuple[dict[str, Any], list[Row], int]:
    """Two arenas as one: the merged manifest, rows, and how many of B's sessions A also had."""
    first, second = read_manifest(a), read_manifest(b)
    for path, manifest in ((a, first), (b, second)):
        if manifest is None:
            raise ConfigError(f"{path}: no {MANIFEST_FILE}; not an arena directory")
    assert first is not None
    assert second is not None
    hashes = [sorted(s["sha256"] for s in m["scenarios"]) for m in (first, second)]
    if hashes[0] != hashes[1]:
        names = [sorted(f"{s['name']} {s['sha256'][:12]}" for s in m["scenarios"])
                 for m in (first, second)]  # fmt: skip
        raise ConfigError(f"cannot merge: the scenarios differ ({a}: {names[0]}; {b}: {names[1]})")
    if sorted(first["seeds"]) != sorted(second["seeds"]):
        raise ConfigError(f"cannot merge: the seeds differ ({a}: {first['seeds']}; "
                          f"{b}: {second['seeds']})")  # fmt: skip
    if mechanisms(first) != mechanisms(second):
        raise ConfigError(f"cannot merge: the mechanisms differ ({mechanisms(first)} and "
                          f"{mechanisms(second)})")  # fmt: skip
    agents = {x["name"]: x for x in first["agents"]}
    for x in second["agents"]:
        if x["name"] in agents and agents[x["name"]] != x:
            raise ConfigError(f"cannot merge: agent {x['name']!r} is not the same agent in both "
                              f"({agents[x['name']]} and {x}); rename one")  # fmt: skip
        agents.setdefault(x["name"], x)
    mine, theirs = rows(a), rows(b)
    _same_baselines((a, first, mine), (b, second, theirs))
    keys = {r["key"] for r in mine}
    merged = mine + [r for r in theirs if r["key"] not in keys]
    manifest = {
        **first,
        "twin_versions": sorted({*first["twin_versions"], *second["twin_versions"]}),
        "agents": list(agents.values()),
        "merged_from": [str(a), str(b)],
    }
    out.mkdir(parents=True, exist_ok=True)
    for r in merged:
        save(out, r)
    write_json(out / MANIFEST_FILE, manifest)
    return manifest, merged, len(theirs) - (len(merged) - len(mine))


Arena = tuple[Path, dict[str, Any], list[Row]]  # directory, manifest, rows


def _same_baselines(one: Arena, other: Arena) -> None:
    """Refuse two arenas whose baselines (the same scenario and seed, no agents) disagree: a
    different twin, or a different machine's arithmetic, played them."""
    (a, first, mine), (b, second, theirs) = one, other
    base_a, base_b = board.baselines(mine), board.baselines(theirs)
    for key in sorted(set(base_a) & set(base_b)):
        ra = {t["tenant"]: t["return_usd"] for t in base_a[key]["tenants"]}
        rb = {t["tenant"]: t["return_usd"] for t in base_b[key]["tenants"]}
        if ra.keys() != rb.keys() or any(abs(ra[t] - rb[t]) > BASELINE_TOLERANCE_USD for t in ra):
            raise ConfigError(
                f"cannot merge: the baselines of {base_a[key]['scenario']} seed {key[1]} differ "
                f"({a}: {ra}; {b}: {rb}; twin {first['twin_versions']} and "
                f"{second['twin_versions']})"
            )
    missing = set(base_a) ^ set(base_b)
    if missing:
        raise ConfigError(f"cannot merge: {len(missing)} baseline session(s) are in only one of "
                          f"the two (finish both arenas first)")  # fmt: skip
