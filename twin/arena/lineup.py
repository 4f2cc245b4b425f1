"""Who plays: the agents of an arena, the line-ups they form, and the sessions that come of them.

Agents are built-in policies by name, or LLM agents named on the command line with an endpoint,
a model and (optionally) a system prompt. Line-ups come from regimes:
- `rotation`: with k agents on a scenario of n tenants, rotation r gives tenant i to agent
  (i + r) mod k: over k rotations every agent plays every tenant once per seed;
- `mirror`: every tenant the same agent, one session per agent;
- `cross`: agent A in one seat, agent B in every other, for each ordered pair and seat.
Every seed also has, per mechanism, one baseline session (the tenants' own policies, no agent,
no trading) and one bound (what a planner with hindsight could reach); every line-up in which an
agent trades is played a second time with trading switched off, for its trade gain.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from twin.errors import ConfigError
from twin.schema.vocabulary import DEFAULT_MECHANISM, Mechanism

if TYPE_CHECKING:
    from twin_agents.registry import Maker

BASELINE = "baseline-session"
"""The `kind` of a scenario's paired baseline session (no agents, no trading)."""
SESSION = "session"
BOUND = "bound"
"""The `kind` of a seed's welfare bound (no session: a program solved on its workload)."""
Regime = Literal["rotation", "mirror", "cross"]
REGIMES: tuple[Regime, ...] = get_args(Regime)
PLANNER = "planner"  # the oracle: the bound's planned holdings (twin/arena/planner_agent.py)
TRAINED = "trained"  # a policy named by --policy: a policy file or an importable callable
NO_TRADE = ".notrade"  # the key suffix of a line-up's session with trading switched off


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@dataclass(frozen=True)
class AgentSpec:
    """One contestant: a built-in policy, or an LLM agent at an OpenAI-compatible endpoint."""

    name: str
    policy: str  # a built-in policy's name, "llm", or "trained"
    base_url: str | None = None
    model: str | None = None
    prompt_file: str | None = None
    prompt: str | None = None  # the system prompt's template (None: the shipped one)
    fallback: str | None = None  # the built-in policy an LLM agent falls back on
    schema_format: str = "json_schema"  # how the endpoint is asked for JSON
    source: str | None = None  # a trained agent's policy file or package.module:callable
    source_sha256: str | None = None  # its file's hash (a policy file's)

    def identity(self) -> dict[str, Any]:
        """What makes this agent this agent, as the manifest records it."""
        out: dict[str, Any] = {"name": self.name, "policy": self.policy}
        if self.policy == "llm":
            from twin_agents.prompting import template

            text = self.prompt if self.prompt is not None else template("system")
            out.update(base_url=self.base_url, model=self.model, fallback=self.fallback,
                       schema_format=self.schema_format, prompt_file=self.prompt_file,
                       prompt_sha256=sha256(text))  # fmt: skip
        if self.policy == TRAINED:
            out.update(source=self.source, source_sha256=self.source_sha256)
        return out


def parse_llm(spec: str, fallback: str, schema_format: str = "json_schema") -> AgentSpec:
    """`NAME=BASE_URL,MODEL[,PROMPT_FILE]` -> an LLM agent; names what is wrong."""
    from pathlib import Path

    from twin_agents.prompting import check_system

    name, sep, rest = spec.partition("=")
    parts = [p.strip() for p in rest.split(",")]
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) or len(parts) not in (2, 3):
        raise ConfigError(f"--llm: {spec!r} is not NAME=BASE_URL,MODEL[,PROMPT_FILE]")
    base_url, model = parts[0], parts[1]
    if not base_url.startswith(("http://", "https://")) or not model:
        raise ConfigError(f"--llm {name}: {base_url!r} is not an http(s) URL, or no model named")
    prompt_file = parts[2] if len(parts) == 3 else None
    prompt = None
    if prompt_file is not None:
        try:
            prompt = Path(prompt_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--llm {name}: cannot read prompt file {prompt_file!r} "
                              f"({exc.__class__.__name__})") from None  # fmt: skip
        problem = check_system(prompt)
        if problem is not None:
            raise ConfigError(f"--llm {name}: prompt file {prompt_file!r}: {problem}")
    return AgentSpec(name, "llm", base_url, model, prompt_file, prompt, fallback, schema_format)


def trained_maker(spec: str) -> tuple[str, str, Maker]:
    """`--policy NAME=SOURCE` (`twin arena`, `twin play`) -> the name, the source and how to
    seat it: SOURCE a policy file (`twin train`'s `policy.json`) or `package.module:callable`
    taking a `Seat` and returning a `Policy`. ConfigError names what is wrong."""
    from twin_agents.learned import load_maker
    from twin_agents.registry import agent_names

    name, sep, source = (part.strip() for part in spec.partition("="))
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) or not source:
        raise ConfigError(f"--policy: {spec!r} is not NAME=POLICY_FILE or NAME=module:callable")
    if name in (*agent_names(), PLANNER):
        raise ConfigError(f"--policy: {name!r} is a built-in agent's name; choose another")
    try:
        return name, source, load_maker(source, name)
    except ValueError as exc:
        raise ConfigError(f"--policy {name}: {exc}") from None


def parse_policy(spec: str) -> AgentSpec:
    """`NAME=SOURCE` -> a trained agent (see `trained_maker`), with its file's hash."""
    from pathlib import Path

    name, source, _ = trained_maker(spec)
    digest = sha256(Path(source).read_bytes()) if source.endswith(".json") else None
    return AgentSpec(name, TRAINED, source=source, source_sha256=digest)


def parse_agents(names: str, llms: list[AgentSpec]) -> list[AgentSpec]:
    """`negotiator,fair_share,smol` -> the agents, built-ins by name and LLM and trained agents
    by the names `--llm` and `--policy` gave them."""
    from twin_agents.registry import BUILT_IN

    named = {a.name: a for a in llms}
    out: list[AgentSpec] = []
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name in named:
            out.append(named[name])
        elif name in BUILT_IN or name == PLANNER:
            out.append(AgentSpec(name, name))
        else:
            raise ConfigError(f"--agents: unknown agent {name!r}; built-in: {list(BUILT_IN)}; "
                              f"the oracle: {PLANNER}; "
                              f"named by --llm or --policy: {list(named) or 'none'}")  # fmt: skip
    if len({a.name for a in out}) != len(out):
        raise ConfigError("--agents: name each agent once")
    if not out:
        raise ConfigError("--agents: name at least one agent")
    return out


SEED_MAX = 2**32 - 1  # a seed sequence's entropy; the CLI's --seed takes the same range
MAX_SEEDS = 1_000_000  # seeds one command plays (each is at least one episode)


def parse_seeds(text: str) -> list[int]:
    """`8` -> seeds 0..7; `42-51` -> 42..51; `1,5,9` -> those; `held-out:30` -> the first 30
    held-out seeds (`twin.rl.seeds`), `train:N` the first N training seeds."""
    split, sep, count = text.partition(":")
    if sep:
        from twin.rl.seeds import SPLITS, SeedSplit

        name = split.replace("-", "_")
        if name not in SPLITS or not count.isdigit():
            raise ConfigError(f"--seeds: {text!r} is not held-out:N or train:N")
        try:
            return SeedSplit().first(name, int(count))
        except ValueError as exc:
            raise ConfigError(f"--seeds: {exc}") from None
    try:
        if "-" in text:
            low, high = (int(x) for x in text.split("-", 1))
            bounds = [low, high, high - low + 1]
        elif "," in text:
            listed = [int(x) for x in text.split(",") if x.strip()]
            bounds = [*listed, len(listed)]
        else:
            bounds = [0, int(text) - 1, int(text)]
    except ValueError:
        raise ConfigError(f"--seeds: {text!r} is not N, A-B or a list") from None
    if max(bounds, default=0) > SEED_MAX or bounds[-1] > MAX_SEEDS:
        raise ConfigError(f"--seeds: {text!r}: seeds go up to {SEED_MAX:,}, and at most "
                          f"{MAX_SEEDS:,} of them")  # fmt: skip
    if "-" in text:
        seeds = list(range(low, high + 1))
    elif "," in text:
        seeds = listed
    else:
        seeds = list(range(int(text)))
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds: {text!r} names no seeds, a negative or a repeated one")
    return seeds


@dataclass(frozen=True)
class ScenarioEntry:
    """A scenario as the arena plays it: how it was named, its name, tenants, hash, and the
    policies its tenants play by themselves (in the baseline, and where no agent plays them)."""

    spec: str
    name: str
    tenants: tuple[str, ...]
    sha256: str
    own_policies: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', self.name)}-{self.sha256[:8]}"


def scenario_entry(spec: str) -> ScenarioEntry:
    """Load and check a scenario now; its hash covers its content and its trace file's bytes
    (not where the file lies), so the same scenario hashes alike on every machine."""
    from twin.sim import scenarios
    from twin.sim.job_sources import trace_path
    from twin.sim.kinds import kind_of

    scenario = scenarios.as_cluster(scenarios.load(spec))
    content = scenario.model_dump_json()
    trace = getattr(scenario, "trace", None)
    if trace is not None:
        content += sha256(trace_path(trace.path).read_bytes())
    own = kind_of(scenario).configured_policies(scenario)
    return ScenarioEntry(spec, scenario.name, tuple(t.name for t in scenario.tenants),
                         sha256(content), tuple(own[t.name] for t in scenario.tenants))  # fmt: skip


def family_entries(spec: str, selector: str) -> list[tuple[ScenarioEntry, int]]:
    """A family's members (`family:market` with `held-out:N` / `train:N`) as the arena plays
    them: each on its own seed, all under the family's name and one hash (of the members'
    own), so the leaderboard pools them as one scenario's seeds, with intervals over members."""
    from twin.sim import families

    name, _ = families.parse(spec)
    members = [(scenario_entry(f"{families.PREFIX}{name}/{m}"), m)
               for m in families.seeds(name, selector)]  # fmt: skip
    label = f"{families.PREFIX}{name} ({selector})"
    common = sha256(label + "".join(entry.sha256 for entry, _ in members))
    return [(replace(entry, name=label, sha256=common), m) for entry, m in members]


@dataclass(frozen=True)
class SessionTask:
    """One session to play: a line-up (tenant -> agent) on a scenario and seed, or the
    scenario's baseline (no line-up)."""

    key: str
    kind: str
    scenario: ScenarioEntry
    seed: int
    rotation: int | None
    lineup: dict[str, AgentSpec] = field(default_factory=dict)
    mechanism: Mechanism = DEFAULT_MECHANISM
    round_timeout_ms: int = 30_000
    first_answer_s: float | None = None
    logs: str | None = None  # where to keep the session's event log and summary
    trading: bool = True
    regimes: tuple[Regime, ...] = ()


def lineup_hash(lineup: dict[str, AgentSpec]) -> str:
    return sha256(repr(sorted((t, sorted(a.identity().items())) for t, a in lineup.items())))


def lineups(tenants: tuple[str, ...], agents: list[AgentSpec],
            regime: Regime) -> list[tuple[int | None, dict[str, AgentSpec]]]:  # fmt: skip
    """The line-ups of one regime, each with its rotation (None outside `rotation`)."""
    k = len(agents)
    if regime == "rotation":
        return [(r, {t: agents[(i + r) % k] for i, t in enumerate(tenants)}) for r in range(k)]
    if regime == "mirror":
        return [(None, dict.fromkeys(tenants, a)) for a in agents]
    return [
        (None, {t: a if j == seat else b for j, t in enumerate(tenants)})
        for a in agents
        for b in agents
        if a is not b
        for seat in range(len(tenants))
    ]


def trades(agent: AgentSpec) -> bool:
    """Whether the agent makes and answers offers (a built-in's registry says; LLMs may; the
    planner does not)."""
    from twin_agents.registry import trades as registered

    if agent.policy == TRAINED:
        from twin_agents.learned import trades as trained_trades

        assert agent.source is not None
        return trained_trades(agent.source)
    return agent.policy != PLANNER and registered(agent.policy)


def tasks(scenarios: list[ScenarioEntry], seeds: list[int], agents: list[AgentSpec], *,
          mechanisms: list[Mechanism], round_timeout_ms: int, first_answer_s: float | None,
          regimes: tuple[Regime, ...] = ("rotation",), trade_gain: bool = True,
          logs: str | None = None) -> list[SessionTask]:  # fmt: skip
    """Every session of the arena: per scenario and seed its bound, and per mechanism the
    baseline and one session per line-up of the regimes (a line-up two regimes share is played
    once), each with a trading agent played again with trading off (unless `trade_gain` is
    off)."""
    out: list[SessionTask] = []
    for entry in scenarios:
        for seed in seeds:
            out.append(SessionTask(f"{entry.slug}.s{seed}.bound", BOUND, entry, seed, None))
            for mechanism in mechanisms:
                out += _sessions(entry, seed, agents, mechanism, regimes=regimes,
                                 round_timeout_ms=round_timeout_ms, trade_gain=trade_gain,
                                 first_answer_s=first_answer_s, logs=logs)  # fmt: skip
    return out


def _sessions(entry: ScenarioEntry, seed: int, agents: list[AgentSpec], mechanism: Mechanism, *,
              regimes: tuple[Regime, ...], round_timeout_ms: int, first_answer_s: float | None,
              trade_gain: bool, logs: str | None) -> list[SessionTask]:  # fmt: skip
    # The default mechanism's keys are those an arena of one mechanism always had.
    prefix = f"{entry.slug}.s{seed}" + ("" if mechanism == DEFAULT_MECHANISM else f".{mechanism}")
    out = [SessionTask(f"{prefix}.baseline", BASELINE, entry, seed, None, mechanism=mechanism,
                       logs=logs, trading=False)]  # fmt: skip
    played: dict[str, SessionTask] = {}
    for regime in regimes:
        for rotation, lineup in lineups(entry.tenants, agents, regime):
            key = f"{prefix}.{lineup_hash(lineup)[:12]}"
            if key in played:
                before = played[key]
                played[key] = replace(before, rotation=before.rotation if before.rotation
                                      is not None else rotation,
                                      regimes=(*before.regimes, regime))  # fmt: skip
                continue
            played[key] = SessionTask(key, SESSION, entry, seed, rotation, lineup, mechanism,
                                      round_timeout_ms, first_answer_s, logs,
                                      regimes=(regime,))  # fmt: skip
    for task in played.values():
        out.append(task)
        if trade_gain and any(trades(a) for a in task.lineup.values()):
            out.append(replace(task, key=task.key + NO_TRADE, trading=False))
    return out


def manifest_agents(agents: list[AgentSpec]) -> list[dict[str, Any]]:
    return [a.identity() for a in agents]


def scenario_record(entry: ScenarioEntry) -> dict[str, Any]:
    return {**asdict(entry), "tenants": list(entry.tenants),
            "own_policies": list(entry.own_policies)}  # fmt: skip
