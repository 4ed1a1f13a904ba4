"""The pages: the page data, the report (Markdown, HTML, CSV), the terminal's tables, the compare page, and how they write figures."""
