"""LLM request traces as jobs: Azure LLM inference (CSV) and Mooncake (JSONL).

A request holds a slice of a GPU (1 / `slots_per_gpu`) for prefill plus decode:
service = input / prefill_tok_s + output / decode_tok_s, per request at that concurrency.
The defaults approximate a 7-8B model on an A100-class GPU; override them per replay.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from twin.replay.common import Rebase
from twin.replay.reader import BadFieldError, ReadLog, csv_rows, lines, required
from twin.sim.jobrecord import JobRecord


@dataclass(frozen=True)
class RequestModel:
    """How long a request occupies its GPU slice."""

    prefill_tok_s: float = 8000.0
    decode_tok_s: float = 40.0
    slots_per_gpu: int = 16

    def service_s(self, input_tokens: float, output_tokens: float) -> float:
        return input_tokens / self.prefill_tok_s + output_tokens / self.decode_tok_s


def _timestamp(text: str) -> float:
    """Azure's `YYYY-MM-DD HH:MM:SS.fffffff` (7 fractional digits, which strptime rejects)."""
    head, _, frac = text.strip().partition(".")
    try:
        when = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        fraction = float(f"0.{frac}") if frac else 0.0
    except ValueError:
        raise BadFieldError("TIMESTAMP", text, "not YYYY-MM-DD HH:MM:SS.fffffff") from None
    return when.timestamp() + fraction


DEFAULT_MODEL = RequestModel()


def read_azure(
    path: Path, log: ReadLog, model: RequestModel = DEFAULT_MODEL
) -> Iterator[JobRecord]:
    rebase = Rebase()
    stem = path.stem
    tenant = stem.removeprefix("AzureLLMInferenceTrace_")
    for line, row in csv_rows(path, log, columns=("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        try:
            submit = rebase(_timestamp(row["TIMESTAMP"]), "TIMESTAMP")
            context, generated = required(row, "ContextTokens"), required(row, "GeneratedTokens")
            if context < 0 or generated < 0:
                raise BadFieldError("ContextTokens", min(context, generated), "negative")
        except BadFieldError as exc:
            log.bad(path, line, str(exc))
            continue
        yield JobRecord(
            job_id=f"{stem}-{line - 1}",
            submit_s=submit,
            service_s=model.service_s(context, generated),
            gpus=1.0 / model.slots_per_gpu,
            tenant=tenant,
            status="completed",
            extras={"input_tokens": context, "output_tokens": generated},
        )


def read_mooncake(
    path: Path, log: ReadLog, model: RequestModel = DEFAULT_MODEL
) -> Iterator[JobRecord]:
    """Mooncake requests; `timestamp` is in milliseconds (quantised to ~3 s buckets upstream)."""
    rebase = Rebase()
    stem = path.stem
    for line, text in lines(path, log):
        if not text.strip():
            continue
        try:
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise BadFieldError("line", text[:40], f"not JSON ({exc.msg})") from None
            except (RecursionError, ValueError):
                raise BadFieldError("line", text[:40], "nested too deep or a number too long "
                                    "to read") from None  # fmt: skip
            if not isinstance(obj, dict):
                raise BadFieldError("line", text[:40], "not a JSON object")
            values = []
            for key in ("timestamp", "input_length", "output_length"):
                value = obj.get(key)
                if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                    raise BadFieldError(key, value, "missing or not a non-negative number")
                values.append(float(value))
            submit = rebase(values[0] / 1000.0, "timestamp")
        except BadFieldError as exc:
            log.bad(path, line, str(exc))
            continue
        hashes = obj.get("hash_ids")
        yield JobRecord(
            job_id=f"{stem}-{line}",
            submit_s=submit,
            service_s=model.service_s(values[1], values[2]),
            gpus=1.0 / model.slots_per_gpu,
            tenant="mooncake",
            status="completed",
            extras={
                "input_tokens": values[1],
                "output_tokens": values[2],
                "prefix_blocks": len(hashes) if isinstance(hashes, list) else 0,
            },
        )
