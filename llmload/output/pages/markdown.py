"""report.md: the page data (`llmload.output.pages.model`) written as Markdown, and the one
Markdown table (`markdown_table`) llmload writes, the terminal's SLO capacity included.
"""

from __future__ import annotations

from collections.abc import Iterable

from llmload.output.pages.model import SECTION_TITLES, Page, Section, Table


def markdown_table(table: Table | None) -> str | None:
    if table is None:
        return None
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines)


def markdown_list(items: Iterable[str]) -> str | None:
    return "\n".join(f"- {item}" for item in items) or None


def section_body(section: Section) -> str:
    """A section's intro, table and note, a blank line apart."""
    return "\n\n".join(p for p in (section.intro, markdown_table(section.table), section.note) if p)


def _section(title: str, body: str | None) -> str | None:
    return f"## {title}\n{body}" if body else None


def page_markdown(page: Page) -> str:
    """The speed test matrix page as Markdown."""
    t = SECTION_TITLES
    decode = "\n\n".join([markdown_table(page.decode), *page.decode_notes]) if page.decode else None
    launch = ("\n".join("    " + line for line in page.launch_command.splitlines())
              if page.launch_command else None)
    warning = f"> **{page.warning.word}.** {page.warning.text}" if page.warning else None
    workload = page.workload_view
    blocks = [
        "# " + page.title,
        page.subtitle,
        f"**Workload:** {workload.line}" if workload else None,
        warning,
        f"**Answer:** {page.answer}" if page.answer else None,
        page.byline,
        _section(t.hardware, page.hardware),
        _section(t.engine, "\n\n".join(page.engine)),
        _section(t.run, page.run),
        _section(t.launch, launch),
        *(_section(s.title, section_body(s)) for s in (workload.sections if workload else ())),
        _section("Notes", markdown_list(workload.notes)) if workload else None,
        _section(t.prefill, markdown_table(page.prefill)),
        _section(t.decode, decode),
        *(_section(s.title, section_body(s)) for s in page.sections),
        _section(t.all, markdown_table(page.all_measurements)),
        _section(t.errors, markdown_list(page.errors)),
        _section(t.checks, markdown_list(c.text for c in page.checks)),
    ]
    return "\n\n".join(b for b in blocks if b) + "\n"
