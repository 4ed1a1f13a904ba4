"""measurements.csv (and slices.csv) written from a page (`page_frame`, `page_csv`): its `Measurements` as a
pandas table, whole-number columns as nullable integers (empty, not NaN, where missing)."""

from __future__ import annotations

import pandas as pd

from llmload.output.pages.model import Measurements, Page


def page_frame(page: Page, table: Measurements | None = None) -> pd.DataFrame:
    """One row per cell (page order), machine-readable: raw numbers, empty where missing
    (`table`: another of the page's tables, slices.csv's)."""
    table = page.measurements if table is None else table
    frame = pd.DataFrame([list(row) for row in table.rows], columns=list(table.columns))
    for column in table.whole:
        frame[column] = pd.array(frame[column].tolist(), dtype="Int64")
    return frame


def page_csv(page: Page) -> str:
    """measurements.csv's text."""
    return page_frame(page).to_csv(index=False)


def slices_csv(page: Page) -> str | None:
    """slices.csv's text (--slice): one row per slice of each cell; None without slices."""
    return page_frame(page, page.slices).to_csv(index=False) if page.slices.columns else None
