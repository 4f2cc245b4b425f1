"""A scenario's workload read from a trace file: the jobs `twin replay` would play, each
played by the tenant its row maps to."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from twin.schema.base import Frozen

TenantName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=64)]


class TraceWorkload(Frozen):
    """Jobs from a trace, as `twin replay` reads it: its format (None: detected), a column map
    for a flat CSV, the window of it to play, and the rule mapping each row to a tenant.

    A row's tenant is the value of `tenant_by` (`tenant`: the format's own tenant column, DLRM's
    `app_name` or a CSV's `tenant=` column; any other name: a field the format keeps, openb's
    `qos`), lower-cased with anything but letters, digits, `_`, `.` and `-` made `-`. Rows whose
    tenant is not one of the scenario's tenants are played by `other`. Jobs keep their submit
    time, GPUs, GPU kind and run time.
    """

    path: str = Field(
        min_length=1,
        max_length=4096,
        description="The trace file; a relative path is found from the current directory, "
        "then from the project's root (where the shipped traces are).",
    )
    format: str | None = Field(None, description="The trace format; None: detected.")
    columns: str | None = Field(
        None, description="A flat CSV's column map, as `twin replay --columns` takes it."
    )
    include_cpu: bool = Field(False, description="Play CPU-only instances too (DLRM).")
    start_h: NonNegativeFloat = Field(0.0, description="Play jobs submitted from this hour on.")
    end_h: PositiveFloat | None = Field(None, description="... and before this hour.")
    max_jobs: PositiveInt | None = None
    skip_bad: bool = Field(False, description="Skip and count corrupt lines (else refuse them).")
    tenant_by: str = Field("tenant", min_length=1, max_length=64)
    other: TenantName = Field("other", description="The tenant that plays unmapped rows.")

    @model_validator(mode="after")
    def _window(self) -> Self:
        if self.end_h is not None and self.end_h <= self.start_h:
            raise ValueError(f"end_h ({self.end_h:g}) must come after start_h ({self.start_h:g})")
        return self
