"""A throwaway PostgreSQL cluster for tests and the load benchmark.

``PostgresCluster.start()`` runs Debian's ``initdb`` into a new temporary folder and
``pg_ctl start`` on a unix socket in that folder (no TCP port, so nothing else on the
machine can reach it and no port can collide). PostgreSQL refuses to run as root: as root,
both run as the ``postgres`` system user (``runuser -u postgres``), which owns the folder.
``new_database()`` gives each test a database of its own; ``stop()`` stops the server and
removes the folder.

Install the server with ``bash scripts/postgres_setup.sh`` (``scripts/setup.sh --tests``
runs it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError

PG_BIN_DIRS = ("/usr/lib/postgresql/15/bin",)
SYSTEM_USER = "postgres"
DB_USER = "maxbench"


def pg_bin_dir() -> Path:
    """The folder of ``initdb`` and ``pg_ctl`` (``$MAXBENCH_PG_BIN``, Debian's, or the PATH)."""
    candidates = [os.environ.get("MAXBENCH_PG_BIN", ""), *PG_BIN_DIRS]
    for folder in filter(None, candidates):
        if (Path(folder) / "initdb").is_file():
            return Path(folder)
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise MaxbenchError(
        "PostgreSQL's initdb was not found: install the server with `bash scripts/postgres_setup.sh` "
        "(Debian's postgresql) or set MAXBENCH_PG_BIN to the folder holding initdb and pg_ctl"
    )


@dataclass
class PostgresCluster:
    """One throwaway server: ``start()``, then ``new_database()`` URLs, then ``stop()``."""

    root: Path | None = None
    bin_dir: Path | None = None
    _run_as: list[str] = field(default_factory=list)
    _n_databases: int = 0

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL over the cluster's unix socket (psycopg 3)."""
        return f"postgresql+psycopg://{DB_USER}@/{database}?host={self.socket_dir}"

    def _run(self, *argv: str) -> None:
        result = subprocess.run(
            [*self._run_as, *argv], capture_output=True, text=True, timeout=120, cwd="/", check=False
        )
        if result.returncode != 0:
            detail = " ".join((result.stderr or result.stdout).split())[-400:]
            raise MaxbenchError(f"{Path(argv[0]).name} failed ({result.returncode}): {detail}")

    def start(self) -> PostgresCluster:
        self.bin_dir = self.bin_dir or pg_bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="maxbench-pg-"))
        data = self.root / "data"
        self.socket_dir.mkdir()
        if os.geteuid() == 0:  # initdb: "cannot be run as root"
            user = pwd.getpwnam(SYSTEM_USER)
            for path in (self.root, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
            self._run_as = ["runuser", "-u", SYSTEM_USER, "--"]
        os.chmod(self.root, 0o700)
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            DB_USER,
            "--auth=trust",  # the socket's folder is private to its owner: no one else can connect
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        options = (
            f"-c listen_addresses='' -c unix_socket_directories='{self.socket_dir}' "
            "-c max_connections=300 -c shared_buffers=64MB -c fsync=on"
        )
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        )
        return self

    def new_database(self, prefix: str = "test") -> str:
        """A new, empty database; returns its URL."""
        import psycopg

        self._n_databases += 1
        name = f"{prefix}_{self._n_databases}"
        with psycopg.connect(host=str(self.socket_dir), user=DB_USER, dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()
