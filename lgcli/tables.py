"""Tables that fit the terminal: every number and every name shown whole.

rich narrows a table that is too wide by cutting its widest columns, words
and numbers included ("34.…"). `print_table` lays a table out itself instead:

- a column of figures is as wide as its longest line, always; a column of
  prose (`Column(wrap=True)`: descriptions, lists of options) is narrowed
  where the table is too wide, widest first, wrapping between words and never
  below its longest word;
- a cell may be given as parts ("83.1 (71.2)", "· 42 (2.50x)"): side by side
  when the table fits so, else one under the other;
- when the names in the first column do not fit, the rows are numbered and the
  names listed whole in a key under the table;
- when even that is too wide, the other columns are split over several tables,
  each repeating the first column: at each change of `Column.group` (the
  bench's scores, then its costs), and within a group as many as fit.

The title and a legend (what each short header means) are printed as
paragraphs, wrapped at the console's width between words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

# A cell: its text, or its parts (side by side when they fit, else stacked).
Cell = Union[str, Sequence[str]]
# Between two columns: one space of padding and the box's (blank) separator.
GAP = 2


@dataclass(frozen=True)
class Column:
    header: str  # may hold "\n": a header on two lines ("top-1\n@0")
    justify: str = "right"
    wrap: bool = False  # prose: may wrap between words where the table is too wide
    group: int = 0  # a split of a too-wide table starts a new table where this changes


def _lines(text: str) -> list[str]:
    return text.split("\n")


def longest_line(text: str) -> int:
    return max(cell_len(line) for line in _lines(text))


def longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def joined(cell: Cell, stacked: bool) -> str:
    if isinstance(cell, str):
        return cell
    return ("\n" if stacked else " ").join(part for part in cell if part)


def fitted_widths(columns: Sequence[Sequence[str]], available: int, wraps: Sequence[bool] = ()) -> list[int] | None:
    """The width of each column (given as its header and cells) such that the
    table, GAP apart, fits `available`: the natural widths (the longest
    lines), and where too wide the widest column that `wraps` narrowed one
    step at a time, never below its longest word; a column that does not wrap
    keeps its natural width. None when that cannot fit."""
    widths = [max(longest_line(text) for text in texts) for texts in columns]
    floors = [max(longest_word(text) for text in texts) if index < len(wraps) and wraps[index] else width
              for index, (width, texts) in enumerate(zip(widths, columns))]
    excess = sum(widths) + GAP * (len(widths) - 1) - available
    while excess > 0:
        narrowable = [index for index, (width, floor) in enumerate(zip(widths, floors)) if width > floor]
        if not narrowable:
            return None
        widest = max(narrowable, key=lambda index: widths[index])
        widths[widest] -= 1
        excess -= 1
    return widths


def print_table(console: Console, title: str, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *,
                legend: str = "", key_header: str | None = None) -> None:
    """Print `rows` under `columns` (the first column names the row) within
    `console.width`, as the module says. `key_header` names what the first
    column holds in the key (e.g. "checkpoint"); without it, names stay in the
    table (short ones, such as method names)."""
    width = console.width
    names = [str(row[0]) for row in rows]
    layout = _layout(columns, rows, width, names)
    if layout is None and key_header is not None:
        numbers = [str(number) for number in range(1, len(rows) + 1)]
        columns = [Column("#"), *columns[1:]]
        layout = _layout(columns, rows, width, numbers) or _split(columns, rows, width, numbers)
        first_column, keyed = columns[0], True
    else:
        layout = layout or _split(columns, rows, width, names)
        first_column, keyed = columns[0], False
    _paragraph(console, title)
    for number, (indices, widths, stacked) in enumerate(layout):
        if number:
            console.print()
        cells = [[str(number) if keyed else str(row[0]), *(joined(row[index], stacked) for index in indices)]
                 for number, row in enumerate(rows, 1)]
        # Rows of several lines are set apart by a blank line, so that each reads as one.
        several = any(longest_line(text) > width or "\n" in text
                      for row in cells for text, width in zip(row, widths))
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                      collapse_padding=False, header_style="bold", show_lines=several)
        chosen = [first_column, *(columns[index] for index in indices)]
        for column, column_width in zip(chosen, widths):
            table.add_column(column.header, justify=column.justify, width=column_width, overflow="fold")
        for row in cells:
            table.add_row(*row)
        console.print(table, markup=False, highlight=False)
    if keyed:
        digits = len(str(len(names)))
        console.print(f"{'#':>{digits}}  {key_header}", markup=False, highlight=False, soft_wrap=True)
        for number, name in enumerate(names, 1):  # never wrapped: a name stays whole on its line
            console.print(f"{number:>{digits}}  {name}", markup=False, highlight=False, soft_wrap=True)
    if legend:
        _paragraph(console, legend)


def _paragraph(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=False, overflow="fold")


def _layout(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int,
            firsts: Sequence[str], indices: Sequence[int] | None = None) -> list[tuple[list[int], list[int], bool]] | None:
    """One table of the first column and `indices` (default: every other
    column): the cells' parts side by side if that fits, else stacked; None
    when even that does not fit."""
    indices = list(range(1, len(columns))) if indices is None else list(indices)
    wraps = [False, *(columns[index].wrap for index in indices)]
    for stacked in (False, True):
        texts = [[columns[0].header, *firsts]]
        texts += [[columns[index].header, *(joined(row[index], stacked) for row in rows)] for index in indices]
        widths = fitted_widths(texts, width, wraps)
        if widths is not None:
            return [(indices, widths, stacked)]
    return None


def _split(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int,
           firsts: Sequence[str]) -> list[tuple[list[int], list[int], bool]]:
    """The other columns over several tables: a new one at each change of
    group, and within a group as many columns in each as fit beside the first
    column (a column too wide even alone gets a table of its own, folded)."""
    groups: list[list[int]] = []
    for index in range(1, len(columns)):
        same_group = groups and columns[groups[-1][-1]].group == columns[index].group
        if same_group and _layout(columns, rows, width, firsts, [*groups[-1], index]) is not None:
            groups[-1].append(index)
        else:
            groups.append([index])
    layout = []
    for group in groups:
        fitted = _layout(columns, rows, width, firsts, group)
        if fitted is None:  # narrower than one column's longest line: rich folds it
            texts = [[columns[0].header, *firsts]] + [[columns[i].header, *(joined(r[i], True) for r in rows)]
                                                      for i in group]
            fitted = [(group, [max(longest_line(t) for t in column) for column in texts], True)]
        layout += fitted
    return layout


__all__ = ["Column", "Cell", "print_table", "fitted_widths"]
