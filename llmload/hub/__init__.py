"""The results hub: every published run in one store (SQLite or PostgreSQL).

`schema` (the tables), `database` (URLs, engines, migrations), `store` (open a store and
read it: the API the web app uses), `publish` (a results directory into the store). Above
`llmload.matrix` and `llmload.twin`, below `llmload.commands` (setup.cfg's layers).
"""
