"""Microsoft Philly `cluster_job_log`: one JSON array of jobs with attempts, read as a stream.

Each job: `jobid`, `user`, `vc`, `submitted_time`, `status` (Pass/Killed/Failed) and
`attempts` [{`start_time`, `end_time`, `detail`: [{`ip`, `gpus`: [...]}]}]. Some keys carry
leading spaces. GPUs are those of the first attempt; run time sums the attempts.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from twin.errors import TraceError
from twin.replay.common import Rebase, epoch_s, status_of
from twin.replay.reader import BadFieldError, ReadLog
from twin.sim.jobrecord import JobRecord

CHUNK = 1 << 16


def objects(path: Path) -> Iterator[tuple[int, Any]]:
    """(line, element) of a top-level JSON array, read in chunks, never whole.

    Elements are objects, so a chunk boundary inside one makes it fail to parse and more is
    read; a malformed array cannot be resynchronised, so it is an error naming the line.
    """
    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")()
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from None
    with stream:
        buf, pos, line, started, eof = "", 0, 1, False, False

        def refill() -> None:
            nonlocal buf, pos, eof
            chunk = stream.read(CHUNK)
            eof = not chunk
            try:
                buf = buf[pos:] + utf8.decode(chunk, final=eof)
            except UnicodeDecodeError:
                raise TraceError(f"{path}: near line {line}: not UTF-8 text") from None
            pos = 0

        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                line += buf[pos] == "\n"
                pos += 1
            if pos == len(buf):
                if eof:
                    what = "the JSON array is not closed" if started else "empty file"
                    raise TraceError(f"{path}: line {line}: {what}")
                refill()
                continue
            if not started:
                if buf[pos] != "[":
                    raise TraceError(f"{path}: line {line}: expected a JSON array ('[')")
                started, pos = True, pos + 1
                continue
            if buf[pos] == "]":
                return
            try:
                obj, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                if not eof:
                    refill()
                    continue
                at = line + buf.count("\n", pos, exc.pos)
                raise TraceError(f"{path}: line {at}: malformed JSON: {exc.msg}") from None
            except (RecursionError, ValueError):
                raise TraceError(f"{path}: line {line}: a job nested too deep or holding a "
                                 "number too long to read") from None  # fmt: skip
            yield line, obj
            line += buf.count("\n", pos, end)
            pos = end


def read(path: Path, log: ReadLog) -> Iterator[JobRecord]:
    rebase = Rebase()
    for line, raw in objects(path):
        try:
            if not isinstance(raw, dict):
                raise BadFieldError("job", type(raw).__name__, "not a JSON object")
            job = {str(k).strip(): v for k, v in raw.items()}
            for key in ("jobid", "submitted_time", "status", "attempts"):
                if key not in job:
                    raise BadFieldError(key, None, "missing")
            submit = rebase(epoch_s(str(job["submitted_time"]), "submitted_time"), "submitted_time")
            attempts = [{str(k).strip(): v for k, v in a.items()} for a in job["attempts"] or []]
            if not attempts or attempts[0].get("start_time") in (None, "None", ""):
                log.skip("never started")
                continue
            first = attempts[0]
            gpus = float(sum(len(d.get("gpus", [])) for d in first.get("detail", []) or []))
            run_s, censored, last_end = 0.0, False, None
            for a in attempts:
                if a.get("start_time") in (None, "None", ""):
                    continue
                start = epoch_s(str(a["start_time"]), "start_time")
                if a.get("end_time") in (None, "None", ""):
                    censored = True
                    continue
                last_end = epoch_s(str(a["end_time"]), "end_time")
                run_s += max(last_end - start, 0.0)
        except (BadFieldError, AttributeError, TypeError) as exc:
            log.bad(path, line, str(exc))
            continue
        if censored and run_s == 0:
            log.skip("still running, run time unknown")
            continue
        yield JobRecord(
            job_id=str(job["jobid"]),
            submit_s=submit,
            service_s=run_s,
            gpus=gpus,
            tenant=str(job.get("vc", "default")),
            status="running" if censored else status_of(str(job["status"])),
            observed_start_s=rebase.shift(epoch_s(str(first["start_time"]), "start_time")),
            observed_end_s=rebase.shift(last_end),
            censored=censored,
            extras={"user": job.get("user", ""), "attempts": len(attempts)},
        )
