"""alembic's environment: runs the migrations on the connection the caller opened.

``maxbench.human_eval.store.migrate`` puts an open Connection, inside a transaction it
commits itself, in ``config.attributes["connection"]``; this module never opens one.
"""

from alembic import context

from maxbench.human_eval.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the ratings migrations through `maxbench db upgrade --db URL`, which passes the connection")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
