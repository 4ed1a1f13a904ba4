"""The results model: a run's and a cell's results as typed, frozen values, the request records they come from, and results.json both ways."""
