"""The `llmload` subcommands besides `run` (`llmload.cli` registers them on its group):
`results` (report, compare, export), `simulator` (fit, predict, sim) and `publish`."""
