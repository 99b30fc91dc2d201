"""Schema versions of the ratings database (alembic, configured in code: no alembic.ini).

The revisions live in ``migrations/versions`` (r0001 the first release's tables, r0002
``page_text``, r0003 ``enrolment``, r0004 model raters: ``annotator.kind`` and ``judge``, and
``judgment``); ``HEAD`` is the one this code's models describe.
Everything here works on a Connection the caller opened, inside a transaction the caller
commits (``store.db`` holds the locks):

- ``alembic_config()``: the Config pointing at the migrations folder inside the package.
- ``current_revision(conn)``: the revision stamped in ``alembic_version``, or None.
- ``detect_revision(tables)``: the revision an unstamped database's tables match (a
  database made before schema versions existed), or a MaxbenchError when none does.
- ``stamp(conn, revision)`` and ``upgrade(conn, target="head")``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from maxbench.errors import MaxbenchError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
HEAD = "0004"
VERSION_TABLE = "alembic_version"

FIRST_RELEASE_TABLES = frozenset({"study", "study_system", "item", "annotator", "assignment", "rating"})
# The tables each revision has: an unstamped database is matched against them, newest first.
REVISION_TABLES = {
    "0001": FIRST_RELEASE_TABLES,
    "0002": FIRST_RELEASE_TABLES | {"page_text"},
    "0003": FIRST_RELEASE_TABLES | {"page_text", "enrolment"},
    "0004": FIRST_RELEASE_TABLES | {"page_text", "enrolment", "judgment"},
}


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def script_directory() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def known_revisions() -> set[str]:
    return {script.revision for script in script_directory().walk_revisions()}


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def detect_revision(tables: set[str]) -> str:
    """The revision whose tables an unstamped database has (extra tables of others are ignored)."""
    for revision in sorted(REVISION_TABLES, reverse=True):
        if REVISION_TABLES[revision] <= tables:
            return revision
    missing = sorted(FIRST_RELEASE_TABLES - tables)
    raise MaxbenchError(
        f"the database's tables match no maxbench schema ({', '.join(missing)} missing): "
        "is it a ratings database? Point --db or MAXBENCH_DB_URL at the right one"
    )


def stamp(conn: Connection, revision: str) -> None:
    MigrationContext.configure(conn).stamp(script_directory(), revision)


def upgrade(conn: Connection, target: str = "head") -> None:
    command.upgrade(alembic_config(conn), target)
