"""The output writers: results.json, per-request records (Parquet), recompute and export, the Markdown/HTML report and its charts, comparisons, the results directory."""
