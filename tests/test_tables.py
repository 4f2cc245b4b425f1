"""Tables fit 80 columns (the width rich takes when output is not a terminal) without splitting a
name or a number: laid out as rich lays them where that keeps words whole, compact where the
borders are what does not fit, and one block per row below that."""

from __future__ import annotations

import io

import rich.table
from rich.console import Console

from twin.cli.render import Table

WIDE = ("tenant", "jobs", "finished", "cost $", "SLA penalties $", "value earned $", "reward $")
ROW = ("research", "7255", "192", "41,602,082.05", "0.00", "222,866.63", "-41,379,215.42")


def rendered(table: rich.table.Table, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    return out.getvalue()


def _table(columns: tuple[str, ...], *rows: tuple[str, ...], header: bool = True) -> Table:
    table = Table(title="tenants", show_header=header)
    for name in columns:
        table.add_column(name, justify="left" if name == "tenant" else "right")
    for row in rows:
        table.add_row(*row)
    return table


def test_a_table_too_wide_for_its_borders_goes_compact_with_every_number_whole() -> None:
    text = rendered(_table(WIDE, ROW))
    assert max(len(line) for line in text.splitlines()) <= 80
    line = next(line for line in text.splitlines() if line.startswith("research"))
    assert line.split() == list(ROW)  # one line, each value whole


def test_a_table_that_fits_is_laid_out_as_rich_lays_it() -> None:
    narrow = _table(("tenant", "reward $"), ("research", "-41.00"))
    plain = rich.table.Table(title="tenants")
    plain.add_column("tenant")
    plain.add_column("reward $", justify="right")
    plain.add_row("research", "-41.00")
    assert rendered(narrow) == rendered(plain)


def test_a_table_too_wide_even_without_borders_is_one_block_per_row() -> None:
    columns = tuple(f"column {k}" for k in range(12))
    row = tuple(f"{k * 1_000_003:,}.25" for k in range(12))
    text = rendered(_table(columns, row, row))
    assert max(len(line) for line in text.splitlines()) <= 80
    for name, value in zip(columns, row, strict=True):
        assert any(line.split() == [*name.split(), value] for line in text.splitlines())


def test_a_long_path_folds_and_every_other_word_stays_whole() -> None:
    path = "/very/long/" + "directory/" * 8 + "openb_node_list_gpu_node.csv"
    table = _table(("key", "value"), ("cluster from", f"{path} (1213 GPU nodes)"),
                   ("observed delay", "p50 2 s · p90 106 s · p99 890 s"), header=False)  # fmt: skip
    text = rendered(table)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "observed delay" in text
    assert "p50 2 s · p90 106 s · p99 890 s" in text
    assert "(1213 GPU nodes)" in text.replace("\n", " ").replace("│", " ").replace("  ", " ")
