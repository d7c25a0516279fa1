# Sourced by .ci/run (and by hand: `source .ci/services/postgres.sh`): a PostgreSQL server
# on loopback for the store tests. Installs PostgreSQL when missing, initialises one cluster,
# starts it on a free 127.0.0.1 port (or reuses the one already running), creates the test
# database and exports CONTEXTFOLD_TEST_POSTGRES_URL. Safe to source again: a second run
# only checks that the server answers.

_contextfold_postgres() {
  local base="${CONTEXTFOLD_PG_DIR:-/var/tmp/contextfold-postgres}"
  local db=contextfold_test
  local bindir
  bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
    echo "postgres.sh: installing PostgreSQL" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi

  # The server refuses to run as root: run it as the package's postgres user.
  local -a as_owner=()
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir "$base" postgres
    as_owner=(runuser -u postgres --)
  fi
  mkdir -p "$base"
  [ "$(id -u)" = 0 ] && chown postgres "$base"

  if [ ! -s "$base/data/PG_VERSION" ]; then
    "${as_owner[@]}" "$bindir/initdb" -D "$base/data" -U postgres --auth=trust \
      --encoding=UTF8 --no-instructions >"$base/initdb.log" 2>&1 \
      || { cat "$base/initdb.log" >&2; return 1; }
  fi

  local port=""
  if [ -s "$base/port" ] && "$bindir/pg_isready" -q -h 127.0.0.1 -p "$(cat "$base/port")"; then
    port=$(cat "$base/port")
  else
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "${as_owner[@]}" "$bindir/pg_ctl" -D "$base/data" -l "$base/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$base" \
      start >/dev/null || { tail -n 20 "$base/server.log" >&2; return 1; }
    echo "$port" >"$base/port"
    # Started here: contextfold_postgres_stop (called by .ci/run on exit) stops it again.
    _contextfold_pg_stop_cmd=("${as_owner[@]}" "$bindir/pg_ctl" -D "$base/data" -m fast -w stop)
  fi

  local exists
  exists=$("$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$db'")
  if [ "$exists" != 1 ]; then
    "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres "$db"
  fi
  export CONTEXTFOLD_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$port/$db"
}

# Stop the server when this script started it (a server found running is left alone).
contextfold_postgres_stop() {
  if [ "${#_contextfold_pg_stop_cmd[@]}" -gt 0 ]; then
    "${_contextfold_pg_stop_cmd[@]}" >/dev/null 2>&1 || true
    _contextfold_pg_stop_cmd=()
  fi
}

_contextfold_pg_stop_cmd=()
_contextfold_postgres
unset -f _contextfold_postgres
