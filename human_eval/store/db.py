"""Opening the ratings database: SQLite (WAL) by default, PostgreSQL through a URL.

Public entry points:

- ``database_url(url=None) -> str``: ``url``, else ``$MAXBENCH_DB_URL``, else
  ``sqlite:///$MAXBENCH_HOME/human_eval/ratings.sqlite3``.
- ``session_for(url=None, create=False) -> sqlalchemy.orm.Session``: a session on that
  database. With ``create=False`` (readers such as ``maxbench report --study ID``) a missing
  SQLite file or an empty database is a MaxbenchError, not a new empty file. Close it when
  done (``with session_for() as session: ...``).
- ``engine_for(url=None, create=False)``: the cached Engine behind those sessions.
- Schema versions (alembic, ``store.migrate``): a new database is stamped at the current
  revision; one made before versions existed is matched to a revision by its tables and
  stamped; one whose schema is older is refused (a MaxbenchError naming ``maxbench db
  upgrade --db URL``) until ``upgrade_database(url)`` runs the migrations.
- ``database_errors(url)``: context manager for commands; a locked or unreachable
  database becomes a one-line MaxbenchError instead of a traceback.
- ``with write_transaction(session): ...; session.commit()``: a unit of work that writes.
  On SQLite it queues writers (WriteGate) and takes the write lock at BEGIN
  (``BEGIN IMMEDIATE``), so concurrent writers wait their turn instead of failing on a
  stale read snapshot or sleeping in SQLite's busy handler.
- In the app (as in Flask's tutorial): ``init_app(app)`` opens ``app.config["DB_URL"]``,
  creating the tables; ``get_db()`` is the request's session, closed by ``close_db`` at
  teardown.

Durability: a rating is acknowledged only after ``commit()`` returns. SQLite runs in WAL
mode with ``synchronous=FULL``: the WAL is fsynced at every commit, so an acknowledged
rating survives a killed server and a power loss. (``NORMAL`` would survive kill -9 too,
because the OS still holds the written pages, but can lose the last commits on power
loss; set ``MAXBENCH_SQLITE_SYNCHRONOUS=NORMAL`` only if that trade is acceptable.)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from urllib.parse import unquote, urlsplit

from flask import Flask, current_app, g
from sqlalchemy import create_engine, event, inspect
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from maxbench.errors import MaxbenchError
from maxbench.fileio import maxbench_home
from maxbench.human_eval.logs import log
from maxbench.human_eval.store import migrate
from maxbench.human_eval.store.models import Base

DEFAULT_BUSY_TIMEOUT_MS = 5000
_SYNCHRONOUS_MODES = {"FULL", "NORMAL", "EXTRA"}
_engines: dict[tuple, Engine] = {}
_gates: dict[Engine, WriteGate] = {}  # SQLite files only
_engines_lock = threading.Lock()


def default_sqlite_path() -> Path:
    return maxbench_home() / "human_eval" / "ratings.sqlite3"


def database_url(url: str | None = None) -> str:
    return url or os.environ.get("MAXBENCH_DB_URL") or f"sqlite:///{default_sqlite_path()}"


def shown_url(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return re.sub(r"//([^/@:]*):[^/@]*@", r"//\1:***@", url)


def _one_line(exc: BaseException) -> str:
    """A driver's message (psycopg's span several lines) as one line."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for another database or an in-memory one). With ``uri=true``
    the database part is an SQLite URI (``file:PATH?mode=ro``): its file is PATH."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    database = parsed.database
    if str(parsed.query.get("uri", "")).lower() in ("true", "1") and database.startswith("file:"):
        database = unquote(urlsplit(database).path)
        if not database or database == ":memory:":
            return None
    return Path(database)


def database_inputs(url: str | None = None) -> list[tuple[Path, str]]:
    """The files of a SQLite ratings database (the database, its journal, write-ahead log, shared
    memory and write lock), as inputs of a command (``maxbench.fileio.check_not_input``); none for
    a server's database or an invalid URL (refused when the database is opened)."""
    try:
        path = _sqlite_file(database_url(url))
    except ArgumentError:
        return []
    if path is None:
        return []
    extra = [(Path(f"{path}{s}"), f"the ratings database's {s[1:]} file") for s in ("-wal", "-shm", "-journal")]
    return [(path, "the ratings database"), *extra, (Path(f"{path}-writelock"), "the ratings database's lock file")]


POSTGRES_EXTRA = "needs the 'postgres' extra (psycopg is not installed): pip install 'maxbench[postgres]'"


def _with_installed_driver(url: str) -> str:
    """``postgresql://`` means psycopg 3 to SQLAlchemy 2.1; use psycopg2 when only it is installed.

    psycopg is the ``postgres`` extra: a PostgreSQL URL whose driver is not installed is a
    one-line MaxbenchError saying how to install it."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgresql+psycopg"):
        import importlib.util

        if importlib.util.find_spec("psycopg") is None:
            if parsed.drivername == "postgresql" and importlib.util.find_spec("psycopg2") is not None:
                return parsed.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)
            raise MaxbenchError(f"database URL {shown_url(url)!r} {POSTGRES_EXTRA}")
    return url


def _configure_sqlite(engine: Engine, busy_timeout_ms: int, synchronous: str) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        # pysqlite would issue its own BEGIN lazily; take over so BEGIN IMMEDIATE is possible.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute(f"PRAGMA synchronous = {synchronous}")
        cur.execute("PRAGMA foreign_keys = ON")
        # No checkpoint inside a commit: it would run while the WriteGate is held and make
        # every queued writer wait for it. The gate's background checkpointer does it.
        cur.execute("PRAGMA wal_autocheckpoint = 0")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _busy_timeout_ms() -> int:
    text = os.environ.get("MAXBENCH_DB_BUSY_TIMEOUT_MS", str(DEFAULT_BUSY_TIMEOUT_MS))
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise MaxbenchError(
            f"MAXBENCH_DB_BUSY_TIMEOUT_MS={text!r} is not a whole number of milliseconds: "
            f"set it to e.g. {DEFAULT_BUSY_TIMEOUT_MS} or unset it"
        )
    return value


def _memory_database(url: str) -> bool:
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def _prepare_sqlite_file(path: Path) -> None:
    """Make the folder of a new SQLite file, or say in one line why the file cannot be there."""
    fix = "name a file in a writable folder with --db sqlite:////path/ratings.sqlite3 or MAXBENCH_DB_URL"
    if path.is_dir():
        raise MaxbenchError(f"database path {path} is a folder, not a file: {fix}")
    if path.exists() and not path.is_file():
        raise MaxbenchError(f"database path {path} is not a regular file (a device, pipe or socket): {fix}")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise MaxbenchError(f"database path {path} cannot exist: {parent} is a file, not a folder; {fix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MaxbenchError(
            f"cannot create the folder {path.parent} for the database ({exc.strerror}): {fix}"
        ) from None
    # SQLite writes its -wal and -shm files beside the database, so the folder must be writable too.
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise MaxbenchError(f"the folder {path.parent} of the database is not writable: {fix}")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise MaxbenchError(f"the database {path} is not readable and writable by this user: {fix}")


def engine_for(
    url: str | None = None,
    create: bool = False,
    busy_timeout_ms: int | None = None,
    synchronous: str | None = None,
    check_schema: bool = True,
) -> Engine:
    """The cached Engine for ``url``; ``create=True`` makes the SQLite file and the tables.

    The schema is checked when the engine is first made: a database whose schema is older
    than this code's (``store.migrate.HEAD``) is a MaxbenchError naming ``maxbench db
    upgrade``; ``check_schema=False`` (the upgrade itself) skips that.

    A new database must outlive the process, so ``create=True`` refuses an in-memory
    SQLite URL (``sqlite://``): the study or ratings stored there would vanish at exit.
    """
    url = database_url(url)
    if busy_timeout_ms is None:
        busy_timeout_ms = _busy_timeout_ms()
    synchronous = (synchronous or os.environ.get("MAXBENCH_SQLITE_SYNCHRONOUS", "FULL")).upper()
    if synchronous not in _SYNCHRONOUS_MODES:
        raise MaxbenchError(
            f"MAXBENCH_SQLITE_SYNCHRONOUS={synchronous!r} is not one of {', '.join(sorted(_SYNCHRONOUS_MODES))}"
        )
    key = (url, busy_timeout_ms, synchronous)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is not None:
            if create:
                gate = _gates.get(engine)
                with gate.held(check_file=False) if gate else nullcontext():
                    _ensure_schema(engine, url, create=True)
            return engine
        try:
            sqlite_file = _sqlite_file(url)
        except ArgumentError:
            raise MaxbenchError(
                f"database URL {shown_url(url)!r} is not a valid SQLAlchemy URL "
                "(e.g. sqlite:////path/ratings.sqlite3 or postgresql://user@host/db)"
            ) from None
        if create and _memory_database(url):
            raise MaxbenchError(
                f"database URL {shown_url(url)!r} is an in-memory database, lost when the program ends: "
                "name a file (sqlite:////path/ratings.sqlite3) or a server (postgresql://user@host/db)"
            )
        if sqlite_file is not None:
            if create:
                _prepare_sqlite_file(sqlite_file)
            elif not sqlite_file.is_file():
                raise MaxbenchError(
                    f"no rating database at {sqlite_file}: create a study first "
                    "(maxbench study create) or point MAXBENCH_DB_URL at the right database"
                )
        try:
            engine = create_engine(_with_installed_driver(url), pool_pre_ping=sqlite_file is None)
        except (ArgumentError, ImportError) as exc:
            raise MaxbenchError(f"cannot open database {shown_url(url)!r}: {_one_line(exc)}") from None
        if engine.dialect.name == "sqlite":
            _configure_sqlite(engine, busy_timeout_ms, synchronous)
        gate = WriteGate(engine, sqlite_file, busy_timeout_ms / 1000) if sqlite_file is not None else None
        if create:
            # Several worker processes may start on a new database at once: one creates the
            # tables, holding the gate and SQLite's write lock; the others then find them.
            try:
                with gate.held(check_file=False) if gate else nullcontext():
                    _ensure_schema(engine, url, create=True)
            except OSError as exc:  # the gate's lock file beside the database
                raise MaxbenchError(
                    f"cannot create the rating database {sqlite_file} ({exc.strerror}): "
                    "name a file in a writable folder with --db or MAXBENCH_DB_URL"
                ) from None
            if gate:
                gate.reset_identity()
        elif check_schema:
            _ensure_schema(engine, url, create=False)
        if gate is not None:
            _gates[engine] = gate
        _engines[key] = engine
        return engine


# Any fixed number: PostgreSQL's advisory lock that serialises schema creation and upgrades.
_SCHEMA_LOCK_KEY = 0x6D617862  # "maxb"


def upgrade_command(url: str) -> str:
    return f"maxbench db upgrade --db {shown_url(url)}"


def _schema_conn(engine: Engine):
    """A connection that holds the schema lock from its first statement (SQLite: BEGIN
    IMMEDIATE; PostgreSQL: an advisory lock released at commit)."""
    conn = engine.connect().execution_options(sqlite_immediate=True)
    if conn.dialect.name == "postgresql":
        # Workers starting together on a new database: without it two see no table and
        # both create one (a unique violation in pg_type), or both stamp the version.
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK_KEY})")
    return conn


def _version_state(conn, url: str, create: bool) -> str:
    """What the database needs: "ok", "create" (no rating tables, ``create``), "stamp"
    (today's tables without a version); an old or unknown schema is a MaxbenchError."""
    tables = set(inspect(conn).get_table_names())
    if not tables & set(Base.metadata.tables):
        if create:
            return "create"
        raise MaxbenchError(
            f"database {shown_url(url)!r} has no rating tables: create a study first (maxbench study create)"
        )
    current = migrate.current_revision(conn)
    if current is None:
        current = migrate.detect_revision(tables)
        if current == migrate.HEAD:
            return "stamp"
    if current == migrate.HEAD:
        return "ok"
    if current not in migrate.known_revisions():
        raise MaxbenchError(
            f"database {shown_url(url)!r} has schema revision {current}, newer than this maxbench "
            f"({migrate.HEAD}): upgrade maxbench to open it"
        )
    raise MaxbenchError(
        f"database {shown_url(url)!r} has an old schema (revision {current}, this maxbench needs "
        f"{migrate.HEAD}): run `{upgrade_command(url)}` first; nothing was changed"
    )


def _ensure_schema(engine: Engine, url: str, create: bool) -> None:
    """Create the tables of a new database (``create``) and stamp them at HEAD; stamp a
    database of today's tables made before schema versions; refuse an old schema."""
    try:
        if not create:
            with engine.connect() as conn:  # readers take no write lock when nothing is to do
                if _version_state(conn, url, create) == "ok":
                    return
        with _schema_conn(engine) as conn:
            state = _version_state(conn, url, create)
            if state == "create":
                Base.metadata.create_all(conn)
                migrate.stamp(conn, migrate.HEAD)
            elif state == "stamp":
                migrate.stamp(conn, migrate.HEAD)
            conn.commit()
    except OperationalError as exc:
        raise MaxbenchError(
            f"cannot create or check the rating tables of {shown_url(url)!r} ({_one_line(exc)}): check that "
            "the database is reachable, writable and not locked by another program"
        ) from None
    except SQLAlchemyError as exc:
        raise MaxbenchError(
            f"cannot read database {shown_url(url)!r} ({_one_line(exc)}): check that it is reachable and not locked"
        ) from None


def upgrade_database(url: str | None = None) -> tuple[str, str]:
    """Bring the ratings database to this code's schema (HEAD), keeping every row: an
    unstamped database is first stamped with the revision its tables match. Returns the
    revisions (before, after). Holds the write gate (SQLite) or the schema lock (PostgreSQL),
    so running app workers wait; they still refuse the old schema until restarted."""
    url = database_url(url)
    engine = engine_for(url, check_schema=False)
    gate = _gates.get(engine)
    try:
        with gate.held() if gate else nullcontext(), _schema_conn(engine) as conn:
            tables = set(inspect(conn).get_table_names())
            if not tables & set(Base.metadata.tables):
                raise MaxbenchError(
                    f"database {shown_url(url)!r} has no rating tables: nothing to upgrade "
                    "(maxbench study create or maxbench serve creates them at the current schema)"
                )
            before = migrate.current_revision(conn)
            if before is None:
                before = migrate.detect_revision(tables)
                migrate.stamp(conn, before)
            if before not in migrate.known_revisions():
                raise MaxbenchError(
                    f"database {shown_url(url)!r} has schema revision {before}, newer than this maxbench "
                    f"({migrate.HEAD}): upgrade maxbench instead"
                )
            migrate.upgrade(conn)
            after = migrate.current_revision(conn)
            conn.commit()
    except OperationalError as exc:
        raise MaxbenchError(
            f"cannot upgrade database {shown_url(url)!r} ({_one_line(exc)}): retry when the program holding it "
            "is done, or check the URL; nothing was changed"
        ) from None
    return before, after


def session_for(url: str | None = None, create: bool = False) -> Session:
    """A new Session on the ratings database (see the module docstring)."""
    return sessionmaker(bind=engine_for(url, create=create), expire_on_commit=False)()


def init_app(app: Flask) -> None:
    """Open ``app.config["DB_URL"]`` (creating the tables) and close each request's session."""
    engine = engine_for(app.config["DB_URL"], create=True)
    app.extensions["maxbench_sessionmaker"] = sessionmaker(bind=engine, expire_on_commit=False)
    app.teardown_appcontext(close_db)


def get_db() -> Session:
    """The request's database session (opened on first use, closed at teardown)."""
    if "db" not in g:
        g.db = current_app.extensions["maxbench_sessionmaker"]()
    return g.db


def close_db(_exc: BaseException | None = None) -> None:
    db = g.pop("db", None)
    if db is not None:
        db.close()  # rolls back anything not committed: only commits were acknowledged


class DatabaseBusy(MaxbenchError):
    """Another writer held the database for longer than the busy timeout."""


class DatabaseGone(MaxbenchError):
    """The SQLite file was deleted or moved while the app had it open."""


class WriteGate:
    """Queues one SQLite database's writers before they ask SQLite for its write lock.

    A writer that finds SQLite's lock taken polls it with growing sleeps (up to 100 ms
    each), so under concurrent submits a writer may sleep while the lock is free. Writers in one process queue on a threading lock; writers in other
    worker processes on an flock of ``<database>-writelock``, polled every 1-2 ms.
    Either wait ends in DatabaseBusy after the busy timeout, like SQLite's own.

    Holding the gate, a writer also checks that the database file is still the one it
    opened: open connections would go on writing into a deleted file, and ratings
    acknowledged there would vanish at the next start. A missing file is DatabaseGone
    (nothing is acknowledged); a file put back (restored) is reopened.

    WAL checkpoints (copying committed pages from the WAL into the database file) run in
    a background thread of each writing process, every CHECKPOINT_INTERVAL_S while there
    were writes, in PASSIVE mode: they never block writers or readers, and no writer
    waits for one. (SQLite's automatic checkpoint runs inside a commit, while the gate is
    held, so every queued writer would wait for it.)
    """

    CHECKPOINT_INTERVAL_S = 1.0

    def __init__(self, engine: Engine, db_path: Path, timeout_s: float):
        self.engine = engine
        self.db_path = db_path
        self.lock_path = Path(f"{db_path}-writelock")
        self.timeout_s = timeout_s
        self._identity = self._file_identity()
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._fd_pid: int | None = None
        self._writes = 0  # since the last checkpoint
        self._checkpointer_pid: int | None = None

    def _start_checkpointer(self) -> None:
        # Threads do not survive fork: each worker process starts its own on first write.
        if self._checkpointer_pid != os.getpid():
            self._checkpointer_pid = os.getpid()
            threading.Thread(target=self._checkpoint_loop, name="sqlite-checkpoint", daemon=True).start()

    def _checkpoint_loop(self) -> None:
        while True:
            time.sleep(self.CHECKPOINT_INTERVAL_S)
            if self._writes:
                self._writes = 0
                self.checkpoint()

    def checkpoint(self) -> None:
        """A PASSIVE checkpoint on a connection of its own; a busy or missing file just waits."""
        try:
            raw = self.engine.raw_connection()
            try:
                raw.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                raw.close()
        except Exception as exc:  # the next round tries again; writers are never affected
            log.warning("WAL checkpoint of %s failed: %s", self.db_path, exc)

    def _fd_for_this_process(self) -> int:
        # An flock belongs to an open file description: a forked worker needs its own.
        if self._fd is None or self._fd_pid != os.getpid():
            self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            self._fd_pid = os.getpid()
        return self._fd

    def reset_identity(self) -> None:
        self._identity = self._file_identity()

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.db_path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def _check_file(self) -> None:
        identity = self._file_identity()
        if identity is None:
            raise DatabaseGone(
                f"the rating database {self.db_path} is gone: restore it (or the right "
                "MAXBENCH_DB_URL) and restart; nothing more was stored"
            )
        if identity != self._identity:
            self.engine.dispose()  # connections into the old file are closed, new ones open this one
            self._identity = identity

    def _busy(self) -> DatabaseBusy:
        return DatabaseBusy(
            f"the rating database is busy (another writer held it for over {self.timeout_s:g} s): try again"
        )

    @contextmanager
    def held(self, check_file: bool = True):
        deadline = time.monotonic() + self.timeout_s
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            raise self._busy()
        try:
            fd = self._fd_for_this_process()
            pause = 0.0005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise self._busy() from None
                    time.sleep(pause)
                    pause = min(pause * 2, 0.002)
            try:
                if check_file:
                    self._check_file()
                    self._start_checkpointer()
                    self._writes += 1
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()


def _gate_for(engine: Engine):
    gate = _gates.get(engine)
    return gate.held() if gate is not None else nullcontext()


@contextmanager
def write_transaction(session: Session):
    """A transaction that holds the write lock (SQLite) from BEGIN; commit inside the block.

    ::

        with write_transaction(session):
            session.execute(update(...))
            session.commit()   # the write is acknowledged only after this returns

    A read transaction already open is ended first, because SQLite cannot upgrade a WAL
    read snapshot that another writer has moved past. Objects read before stay loaded
    (expire_on_commit=False) and may be stale: decisions that race with other writers
    are taken by SQL inside the block (conditional UPDATEs, re-selects). Whatever is not
    committed when the block ends is rolled back.
    """
    if session.new or session.dirty or session.deleted:
        raise RuntimeError("write_transaction() must come before any change to the session")
    if session.in_transaction():
        session.commit()  # nothing pending: only ends the read snapshot
    with _gate_for(session.get_bind()):
        session.connection(execution_options={"sqlite_immediate": True})
        try:
            yield session
        finally:
            if session.in_transaction():
                session.rollback()


@contextmanager
def database_errors(url: str | None = None):
    """For commands: a locked or unreachable database becomes a one-line MaxbenchError."""
    try:
        yield
    except OperationalError as exc:
        raise MaxbenchError(
            f"database {shown_url(database_url(url))} is locked or unreachable ({_one_line(exc)}): retry when the "
            "program holding it is done, or check the URL; nothing was changed"
        ) from None


def dispose_engines() -> None:
    """Close every pooled connection (tests, and before a process forks)."""
    with _engines_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()
        _gates.clear()
