"""The ratings database's schema history as alembic migrations (``versions/``).

No alembic.ini: ``maxbench.human_eval.store.migrate.alembic_config()`` builds the Config in
code and points it at this folder; ``maxbench db upgrade`` runs them. A developer adding a
table or column writes the next revision here (``env.py`` runs on the connection the
caller passes in ``config.attributes["connection"]``) and raises
``store.migrate.HEAD`` with it.
"""
