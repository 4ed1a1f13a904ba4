"""The results directory and its files: claimed and locked, results.json written and read, per-request records, recompute and export."""
