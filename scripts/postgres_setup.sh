#!/usr/bin/env bash
# Installs Debian's PostgreSQL server for the rating app's tests: each test session starts a
# throwaway cluster of its own (human_eval/testing/postgres.py: initdb into a temporary folder, a
# private unix socket, as the postgres user when run as root). The Debian package's own
# cluster service is not needed and is left as the package sets it up.
# Idempotent: does nothing when initdb is already installed.
set -euo pipefail
if [ -x /usr/lib/postgresql/15/bin/initdb ]; then
    echo "postgresql already installed: $(/usr/lib/postgresql/15/bin/initdb --version)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y postgresql
/usr/lib/postgresql/15/bin/initdb --version
