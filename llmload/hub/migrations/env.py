"""Alembic's environment for the store: migrations run only programmatically, on the
connection `llmload.hub.database.migrate` opens (in its transaction, holding its lock), which
it passes as `config.attributes["connection"]`."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
