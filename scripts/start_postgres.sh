#!/usr/bin/env bash
# A local PostgreSQL cluster for sweeps that several workers share; prints the storage override.
#
#   scripts/start_postgres.sh [DIR] [PORT]   start (or find already running) the cluster in DIR
#   scripts/start_postgres.sh stop [DIR]     stop it (the data stays in DIR)
#
# DIR defaults to ./sweeps/pg, PORT to 5433. Idempotent: a second start prints the same line.
# stdout is one line for the sweep command, e.g.
#   hydra.sweeper.storage=postgresql+psycopg2://postgres@127.0.0.1:5433/optuna
# then start each worker with the same storage and hydra.sweeper.study_name, and (until the
# sampler seeds per worker) its own hydra.sweeper.seed, or workers draw the same points.
#
# Listens on 127.0.0.1 only, with trust authentication: any local user may connect. For workers
# on other machines, run a real server with passwords instead.
# Needs the PostgreSQL server (apt-get install -y postgresql; or PG_BIN=<folder with initdb>) and
# psycopg2 in the sweep's Python (pip install psycopg2-binary). PostgreSQL refuses to run as root,
# so under root the server runs as the `postgres` OS user (DIR's parents must be reachable by it).
# PYTHON (default: the repo's .venv, else python3) creates Optuna's tables once, before workers
# start, because workers opening a fresh database at the same moment race on CREATE TABLE.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
ACTION=start
if [[ "${1:-}" == stop ]]; then ACTION=stop; shift; fi
DIR="$(mkdir -p "${1:-sweeps/pg}" && cd "${1:-sweeps/pg}" && pwd)"
PORT="${2:-5433}"
DB="${PG_DB:-optuna}"
DATA="$DIR/data"

if [[ -z "${PG_BIN:-}" ]]; then
    PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [[ -n "$PG_BIN" ]] || PG_BIN="$(dirname "$(command -v pg_ctl || echo /nonexistent/pg_ctl)")"
fi
if [[ ! -x "$PG_BIN/pg_ctl" ]]; then
    echo "PostgreSQL not found: apt-get install -y postgresql, or set PG_BIN" >&2
    exit 1
fi
AS=()
if [[ "$(id -u)" == 0 ]]; then
    chown postgres "$DIR"
    AS=(runuser -u postgres --)
    if ! "${AS[@]}" test -w "$DIR"; then
        echo "the postgres user cannot reach $DIR (a parent folder is private): pick another DIR" >&2
        exit 1
    fi
fi
pg() { "${AS[@]}" "$PG_BIN/$1" "${@:2}"; }

if [[ "$ACTION" == stop ]]; then
    if pg pg_ctl status -D "$DATA" >/dev/null 2>&1; then pg pg_ctl stop -D "$DATA" -m fast -w; fi
    exit 0
fi

if [[ ! -f "$DATA/PG_VERSION" ]]; then
    pg initdb -D "$DATA" -U postgres -A trust -E UTF8 >"$DIR/initdb.log"
fi
if pg pg_ctl status -D "$DATA" >/dev/null 2>&1; then
    PORT="$(sed -n 4p "$DATA/postmaster.pid")"  # the 4th line of postmaster.pid is the port
    echo "already running in $DIR on port $PORT" >&2
else
    pg pg_ctl start -D "$DATA" -l "$DIR/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$DIR" >&2
fi
if [[ -z "$(pg psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$DB'")" ]]; then
    pg createdb -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
fi

URL="postgresql+psycopg2://postgres@127.0.0.1:$PORT/$DB"
PY="${PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PY" ]] || PY=python3
if ! "$PY" -c 'import sys, optuna; optuna.storages.RDBStorage(sys.argv[1])' "$URL" 2>"$DIR/schema.log"
then
    echo "warning: could not create Optuna's tables with $PY (see $DIR/schema.log);" \
        "pip install psycopg2-binary, then start one worker before the others" >&2
fi
echo "hydra.sweeper.storage=$URL"
