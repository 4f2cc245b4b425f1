"""The `twin` command as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from twin.cli.main import main
from twin.eventlog.log import from_dict, read_jsonl
from twin.eventlog.metrics import Metrics
from twin.schema.summary import Summary


def twin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "twin", *args], capture_output=True, text=True, check=False
    )


def test_run_writes_the_event_log_and_summary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", "--scenario", "default", "--seed", "1", "--out", str(out)]) == 0
    summary = Summary.model_validate_json((out / "summary.json").read_text())
    assert summary.jobs.arrived > 0
    assert summary.end_reason == "horizon"


def test_same_seed_gives_byte_identical_event_logs(tmp_path: Path) -> None:
    for d in ("A", "B"):
        assert (
            main(
                ["run", "--scenario", "gpucluster-hard", "--seed", "7", "--out", str(tmp_path / d)]
            )
            == 0
        )
    a = (tmp_path / "A" / "events.jsonl").read_bytes()
    assert a == (tmp_path / "B" / "events.jsonl").read_bytes()
    main(["run", "--scenario", "gpucluster-hard", "--seed", "8", "--out", str(tmp_path / "C")])
    assert a != (tmp_path / "C" / "events.jsonl").read_bytes()


def test_the_summary_can_be_rebuilt_from_the_jsonl_alone(tmp_path: Path) -> None:
    main(["run", "--scenario", "default", "--seed", "2", "--out", str(tmp_path)])
    with (tmp_path / "events.jsonl").open("rb") as f:
        records = [from_dict(d) for d in read_jsonl(f)]
    metrics = Metrics(session="default-s2")
    metrics.consume(records)
    written = Summary.model_validate_json((tmp_path / "summary.json").read_text())
    assert metrics.summary() == written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--scenario", "nope"], "no scenario named 'nope'"),
        (
            ["run", "--set", "queue.policy=lifo"],
            "field queue.policy: Input should be 'fifo', 'priority', 'sjf' or 'manual'",
        ),
        (["run", "--set", "tenants.0.initial_gpus.a100=-1"], "greater than or equal to 0 (got -1)"),
        (["run", "--policy", "yolo"], "unknown policy 'yolo'; allowed: autoscale, static"),
        (["run", "--set", "oops"], "must look like path.to.field=value"),
        (["play", "--agents", "mallory=greedy"], "'mallory=greedy' is not TENANT=POLICY"),
        (["play", "--agents", "research=yolo"], "unknown policy 'yolo'"),
        (["play", "--agents", "research=llm"], "llm agents need --llm-base-url and --llm-model"),
        (["play", "--scenario", "gpucluster-easy", "--agents", "x=greedy"], "need a cluster"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args: list[str], message: str) -> None:
    result = twin(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_scenarios_lists_the_builtins() -> None:
    result = twin("scenarios")
    assert result.returncode == 0
    for name in ("default", "gpucluster-easy", "gpucluster-medium", "gpucluster-hard", "mmc"):
        assert name in result.stdout


def test_bench_prints_a_json_line_last() -> None:
    result = twin("bench", "rl", "--quick", "--json")
    assert result.returncode == 0
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "rl"
    assert figures["steps_per_s"] > 0


def test_event_logs_are_identical_across_processes(tmp_path: Path) -> None:
    """Separate interpreters (different hash seeds) write the same bytes for the same seed."""
    logs = []
    for i, hash_seed in enumerate(("1", "2")):
        out = tmp_path / str(i)
        subprocess.run(
            [sys.executable, "-m", "twin", "run", "--seed", "3", "--out", str(out)],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        logs.append((out / "events.jsonl").read_bytes())
    assert logs[0] == logs[1]


def test_replay_prints_a_summary_and_writes_its_files(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[1] / "traces" / "samples" / "helios_synthetic.csv"
    result = twin("replay", "--trace", str(sample), "--gpus", "32", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "5 read · 5 replayed" in result.stdout
    assert "1 never started (killed)" in result.stdout
    report = json.loads((tmp_path / "replay.json").read_text())
    assert report["format"] == "slurm"
    assert (tmp_path / "events.jsonl").stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replay", "--trace", "no/such/file.csv"], "trace file 'no/such/file.csv' not found"),
        (["replay", "--trace", "pyproject.toml"], "cannot tell the format from its first line"),
        (
            ["replay", "--trace", "traces/samples/itp_synthetic.csv", "--gpus", "0"],
            "argument --gpus: at least 1 (got 0)",
        ),
        (
            ["replay", "--trace", "traces/samples/itp_synthetic.csv", "--columns", "submit=t"],
            "column map: submit= and gpus= are required",
        ),
        (
            ["trace", "generate", "--jobs", "0", "--out", "x.csv"],
            "argument --jobs: at least 1 (got 0)",
        ),
    ],
)
def test_replay_bad_input_is_one_clear_line_and_exit_2(args: list[str], message: str) -> None:
    result = twin(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def verdict(*args: str) -> dict[str, object]:
    result = twin("kernel", "evaluate", "--json", *args)
    assert result.returncode == 0, result.stderr
    out: dict[str, object] = json.loads(result.stdout)
    return out


def test_kernel_evaluate_answers_the_70b_examples() -> None:
    one = verdict("--model", "llama-3.1-70b", "--gpu", "h100", "--gpus", "1")
    assert (one["feasible"], one["reasons"]) == (False, ["oom"])
    tp8 = verdict("--model", "llama-3.1-70b", "--gpu", "h100", "--gpus", "8", "--tp", "8")
    assert tp8["reasons"] == ["oom"]
    tp32 = verdict("--model", "llama-3.1-70b", "--gpu", "h100", "--gpus", "32", "--tp", "32")
    assert tp32["feasible"] is True
    assert tp32["memory_gib_per_gpu"] < tp32["usable_gib_per_gpu"]  # type: ignore[operator]
    fp8 = verdict(
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "a100-80gb",
        "--gpus",
        "32",
        "--tp",
        "8",
        "--pp",
        "4",
        "--precision",
        "bf16,mlp=fp8",
    )
    assert fp8["reasons"] == ["unsupported_precision"]
    assert fp8["score"] == 0.01  # a plan that cannot run earns the floor
    assert fp8["precision"] == {
        "embedding": "bf16",
        "attention": "bf16",
        "mlp": "fp8",
        "norm": "bf16",
        "head": "bf16",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-9", "--gpu", "h100", "--gpus", "8"], "unknown model 'gpt-9'"),
        (["--model", "llama-3.1-8b", "--gpu", "tpu", "--gpus", "8"], "unknown accelerator 'tpu'"),
        (
            ["--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8", "--precision", "mlp=fp7"],
            "'fp7' is not a precision",
        ),
        (
            ["--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8", "--tp", "0"],
            "argument --tp: at least 1 (got 0)",
        ),
        (
            ["--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "0"],
            "argument --gpus: at least 1 (got 0)",
        ),
    ],
)
def test_kernel_evaluate_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = twin("kernel", "evaluate", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_play_runs_a_whole_session_of_agents_in_one_command(tmp_path: Path) -> None:
    out = tmp_path / "play"
    result = twin("play", "--agents", "research=negotiator,inference=fair_share,batch=greedy",
                  "--seed", "3", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for tenant in ("research", "inference", "batch"):
        assert tenant in result.stdout
    records = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    made = {r["tenant"]: r["policy"] for r in records if r["kind"] == "decision_made"}
    assert made == dict.fromkeys(("research", "inference", "batch"), "agent")
    assert Summary.model_validate_json((out / "summary.json").read_text()).end_reason == "horizon"


def test_play_with_a_dead_model_endpoint_finishes_on_fallbacks(tmp_path: Path) -> None:
    """Started without the preflight (which refuses a dead endpoint: `test_preflight.py`)."""
    result = twin("play", "--agents", "research=llm,inference=fair_share",
                  "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "none",
                  "--no-preflight", "--out", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads((tmp_path / "agents.json").read_text())["agents"]["research"]
    assert report["end_reason"] == "horizon"
    assert report["defaulted_rounds"] == 0  # the fallback answered in time, every round
    llm = report["llm"]
    assert llm["decisions"] == report["rounds"] == llm["fallbacks"]
    assert llm["http_errors"] == 1  # found dead once: no retry, and then down
    assert llm["endpoint_down"] == llm["asks"] - 1  # the fallback answered at once


def test_a_bad_declared_session_is_one_clear_line(tmp_path: Path) -> None:
    declared = tmp_path / "session.yaml"
    declared.write_text("session_id: main\nscenario: market\ntokens: {research: short}\n")
    result = twin("serve", "--port", "1", "--session-file", str(declared))
    assert result.returncode == 2
    assert "session.yaml: field tokens.research: String should have at least 16" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--session-id", "a b"], "--session-id: field session_id: String should match"),
        (["--session-id", ""], "--session-id: field session_id: String should"),
    ],
)
def test_a_bad_session_id_for_a_declared_session_is_one_clear_line(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    declared = tmp_path / "session.yaml"
    declared.write_text("session_id: main\nscenario: market\nagents: []\n")
    result = twin("serve", "--port", "1", "--session-file", str(declared), *flags)
    assert result.returncode == 2
    assert said in result.stderr
    assert "Traceback" not in result.stderr


def test_a_session_id_without_a_declared_session_is_one_clear_line() -> None:
    result = twin("serve", "--port", "1", "--session-id", "again")
    assert result.returncode == 2
    assert "--session-id names the session --session-file declares" in result.stderr
    assert "Traceback" not in result.stderr


def on_a_terminal(*args: str) -> str:
    """What `twin ARGS...` shows on a 160-column terminal (a pseudo-terminal)."""
    import os
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "twin", *args], stdout=slave, stderr=slave,
                            env=env)  # fmt: skip
    os.close(slave)
    out = b""
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out += data
    os.close(master)
    assert proc.wait() == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["run", "--scenario", "default"], ["running (virtual time)", "of 24 h", "h/s", "eta"]),
        (["replay", "--trace", "{openb}", "--gpus", "100"], ["replaying", "of 8,153 jobs", "eta"]),
    ],
)
def test_long_work_shows_a_progress_bar_on_a_terminal_only(
    real_traces: Path, args: list[str], shown: list[str]
) -> None:
    openb = real_traces / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv"
    args = [a.format(openb=openb) for a in args]
    screen = on_a_terminal(*args)
    for text in shown:
        assert text in screen
    piped = twin(*args)
    assert piped.returncode == 0
    assert shown[0] not in piped.stdout + piped.stderr


def test_serve_on_a_busy_port_is_one_line_before_anything_is_printed() -> None:
    """No generated token or dashboard address for another program's port, no traceback."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = twin("serve", "--port", str(port))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"twin: error: --port {port}: the port is in use on 127.0.0.1 (another program listens "
        "there); choose another port"
    ]
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (
            ["--reserved-envs", "64"],
            "--reserved-envs: 64 of the cap of 64 environments would "
            "leave none to clients without the operator's token (got 64)",
        ),
    ],
)
def test_serve_with_impossible_caps_is_one_line(flags: list[str], line: str) -> None:
    result = twin("serve", "--port", "9", *flags)
    assert result.returncode == 2
    [said] = result.stderr.strip().splitlines()
    assert said.startswith(f"twin: error: {line}"), said


def test_a_cap_out_of_its_range_is_refused_where_it_is_parsed() -> None:
    result = twin("serve", "--port", "9", "--max-envs-per-client", "0")
    assert result.returncode == 2
    *usage, said = result.stderr.strip().splitlines()
    assert usage[0].startswith("usage: twin serve ")
    assert said == "twin serve: error: argument --max-envs-per-client: at least 1 (got 0)"


OPENB_TRACES = "traces/alibaba-gpu-v2023-openb"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--scenario", "openb-tenants", "--seed", "1"],
        ["replay", "--trace", f"{OPENB_TRACES}/openb_pod_list_default.csv",
         "--cluster", f"{OPENB_TRACES}/openb_node_list_gpu_node.csv"],
        ["play", "--scenario", "market", "--agents",
         "research=negotiator,inference=negotiator,batch=negotiator"],
    ],
    ids=["run", "replay", "play"],
)  # fmt: skip
def test_tables_never_cut_a_value_at_80_columns_in_a_pipe(args: list[str]) -> None:
    narrow = {**os.environ, "COLUMNS": "80"}
    result = subprocess.run([sys.executable, "-m", "twin", *args], capture_output=True,
                            text=True, check=False, env=narrow)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "--seed", "-1"], "argument --seed: a seed is from 0 to 4,294,967,295 (got -1)"),
        (["run", "--seed", "1.5"], "argument --seed: a seed is a whole number (got '1.5')"),
        (["train", "--scenario", "market", "--seed", "-1"], "argument --seed: a seed is from 0"),
        (["play", "--agents", "research=negotiator", "--seed", "-1"], "argument --seed: a seed"),
        (["play", "--agents", "research=negotiator", "--round-timeout-ms", "-5"],
         "argument --round-timeout-ms: a duration in ms is above 0 (got -5)"),
        (["serve", "--port", "99999"], "argument --port: a port is from 0 to 65535 (got 99999)"),
        (["serve", "--port", "-1"], "argument --port: a port is from 0 to 65535 (got -1)"),
        (["serve", "--round-timeout-ms", "0"], "argument --round-timeout-ms: a duration in ms"),
        (["run", "--out", "{file}"], "argument --out: {file} exists and is not a directory"),
        (["sweep", "--scenario", "default", "--vary", "seed=0,1", "--out", "{file}"],
         "argument --out: {file} exists and is not a directory"),
        (["bound", "--scenario", "market", "--out", "{file}/below"],
         "argument --out: cannot create directory {file}/below: {file} is a file"),
    ],
    ids=["run-seed", "run-seed-float", "train-seed", "play-seed", "play-timeout", "serve-port",
         "serve-port-negative", "serve-timeout", "run-out-file", "sweep-out-file",
         "bound-out-unwritable"],
)  # fmt: skip
def test_an_ordinary_mistake_in_a_flag_is_a_usage_error_naming_it_not_a_traceback(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "a-file"
    file.write_text("not a directory\n")
    with pytest.raises(SystemExit) as exited:
        main([a.format(file=file) for a in args])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"twin {args[0]}: error: ")
    assert said.format(file=file) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing left behind


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (["run", "--bogus"], "usage: twin run "),
        (["kernel", "evaluate", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8",
          "--bogus"], "usage: twin kernel evaluate "),
    ],
    ids=["run", "kernel-evaluate"],
)  # fmt: skip
def test_an_unknown_flag_is_refused_with_its_own_command_s_usage(
    args: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage)
    assert err.strip().splitlines()[-1].endswith("error: unrecognized arguments: --bogus")


def test_a_scenario_file_that_is_not_utf8_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "latin1.yaml"
    scenario.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert main(["run", "--scenario", str(scenario)]) == 2
    [said] = capsys.readouterr().err.strip().splitlines()
    assert said == f"twin: error: {scenario}: not UTF-8 text (byte 9 is 0xe9); save it as UTF-8"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name: x\npools: []\n",
         "field kind: missing; a scenario names its kind, one of: agentic_rl, cluster, gpucluster"),
        ("kind: clusterr\nname: x\n",
         "field kind: 'clusterr' is not one; a scenario names its kind, one of: agentic_rl, "
         "cluster, gpucluster"),
        ("kind: cluster\nname: x\npools:\n- {name: p, gpu_type: h100, max_gpus: 1,\n"
         "   price_usd_per_gpu_h: 1, provision_delay_s: {median: 60}}\n"
         "tenants: [{name: a}]\n",
         "field pools.0.provision_delay_s.dist: missing; a distribution names its dist, one of: "
         "choice, constant, exponential, lognormal, uniform"),
        ("name: x\n  pools: [\n",
         ", line 2, column 8: not valid YAML: mapping values are not allowed in this context"),
    ],
    ids=["no-kind", "unknown-kind", "no-dist", "yaml-syntax"],
)  # fmt: skip
def test_a_bad_scenario_file_is_one_line_in_the_domain_s_words(
    text: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "mine.yaml"
    scenario.write_text(text)
    assert main(["run", "--scenario", str(scenario)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"twin: error: {scenario}")
    assert said in line
    assert "<unicode string>" not in line
    assert "discriminator" not in line


def test_a_sweep_of_no_seeds_is_a_usage_error_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--seeds", "-1", "--out", "o"])
    assert "argument --seeds: at least 1 (got -1)" in capsys.readouterr().err


def test_an_error_raised_while_ctrl_c_arrives_is_the_interrupt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A C extension that meets a pending KeyboardInterrupt mid-call raises its own error (a
    pybind11 call in matplotlib said "incompatible function arguments" when Ctrl-C landed in
    `twin report`): the command says it was interrupted, exit 130, with no traceback. The same
    error with no interrupt is a bug, and still raises."""
    import argparse
    import signal

    from twin.cli.main import run_command

    def cut_short(_: argparse.Namespace) -> int:
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            raise TypeError("affine_transform(): incompatible function arguments") from None
        return 0

    assert run_command(argparse.Namespace(func=cut_short, command="report")) == 130
    assert capsys.readouterr().err == "twin: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back

    def broken(_: argparse.Namespace) -> int:
        raise TypeError("a bug")

    with pytest.raises(TypeError, match="a bug"):
        run_command(argparse.Namespace(func=broken, command="report"))
