#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests: initdb in DIR, listen on 127.0.0.1 at a random free
# port below the ephemeral range (unix socket in DIR too), trust authentication, fsync off
# (commits survive a killed server, not an OS crash).
#
#   scripts/throwaway-postgres.sh start DIR   # prints DATABASE_URL=postgres://postgres@127.0.0.1:PORT/postgres
#   scripts/throwaway-postgres.sh url DIR     # prints it again
#   scripts/throwaway-postgres.sh stop DIR    # stops the server; DIR stays for you to remove
#
# `eval "$(scripts/throwaway-postgres.sh start /tmp/pg)"` sets DATABASE_URL in the shell.
# THROWAWAY_PG_ALSO_LISTEN=ADDR/PREFIX (e.g. 10.244.0.1/24, the test cluster's node address on its
# bridge) also listens on ADDR and trusts clients from that subnet, so pods can reach it; the
# URL line stays on 127.0.0.1.
# THROWAWAY_PG_PORT=PORT starts on that port only (a server restarted where its clients expect it).
# THROWAWAY_PG_ATTEMPTS=N tries N ports (or the one port N times, 0.25 s apart); default 20.
# Only the DATABASE_URL line goes to stdout; progress and errors go to stderr.
#
# The binaries are taken from $PG_BINDIR, else the newest /usr/lib/postgresql/*/bin, else
# `pg_config --bindir`, else initdb on PATH. initdb refuses to run as root, so as root the cluster
# runs as $THROWAWAY_PG_USER (default: postgres) through runuser and DIR is chown'ed to that user;
# DIR must then be reachable by it (under /tmp is fine, under /root is not).
#
# The Rust test helper stress_common::store::testing::ThrowawayPostgres embeds and runs this very
# script, so both behave the same.
set -euo pipefail

prog=${0##*/}

die() {
    echo "$prog: $*" >&2
    exit 1
}

usage() {
    echo "usage: $prog start DIR | stop DIR | url DIR" >&2
    exit 2
}

find_bindir() {
    if [[ -n ${PG_BINDIR:-} ]]; then
        [[ -x $PG_BINDIR/initdb && -x $PG_BINDIR/pg_ctl ]] ||
            die "PG_BINDIR=$PG_BINDIR has no initdb and pg_ctl"
        echo "$PG_BINDIR"
        return
    fi
    local candidate best=""
    for candidate in /usr/lib/postgresql/*/bin; do
        [[ -x $candidate/initdb && -x $candidate/pg_ctl ]] || continue
        # Keep the highest major version (versions are plain integers since 10).
        if [[ -z $best ]] || (($(basename "$(dirname "$candidate")") > $(basename "$(dirname "$best")"))); then
            best=$candidate
        fi
    done
    if [[ -z $best ]] && command -v pg_config >/dev/null 2>&1; then
        candidate=$(pg_config --bindir 2>/dev/null || true)
        [[ -x $candidate/initdb && -x $candidate/pg_ctl ]] && best=$candidate
    fi
    if [[ -z $best ]] && command -v initdb >/dev/null 2>&1; then
        best=$(dirname "$(command -v initdb)")
    fi
    [[ -n $best ]] ||
        die "no PostgreSQL server binaries found (looked at \$PG_BINDIR, /usr/lib/postgresql/*/bin, pg_config --bindir, PATH); install postgresql (e.g. apt-get install postgresql-15) or set PG_BINDIR"
    echo "$best"
}

# Runs a command as the cluster's owner: ourselves, or an unprivileged user when we are root.
as_owner() {
    if ((EUID == 0)); then
        runuser -u "$owner" -- "$@"
    else
        "$@"
    fi
}

is_running() {
    [[ -f $dir/data/postmaster.pid ]] && as_owner "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1
}

# The lowest port the kernel hands to outgoing connections (32768 by default): random ports are
# picked below it, where no client socket can be holding one.
ephemeral_low() {
    local low
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
    ((low > 21000)) || low=32768
    echo "$low"
}

port_in_use() {
    # A successful connect means something listens there.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

cmd_start() {
    bindir=$(find_bindir)
    if ((EUID == 0)); then
        getent passwd "$owner" >/dev/null ||
            die "running as root and user '$owner' does not exist; create an unprivileged user or set THROWAWAY_PG_USER"
        chown -R "$owner" "$dir"
        as_owner test -w "$dir" ||
            die "$dir is not writable by user '$owner' (is a parent directory private to root?)"
    fi
    is_running && die "a server already runs in $dir/data; stop it first"

    if [[ ! -f $dir/data/PG_VERSION ]]; then
        echo "$prog: initdb in $dir/data ($bindir)" >&2
        as_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C \
            --no-sync >"$dir/initdb.log" 2>&1 ||
            die "initdb failed, see $dir/initdb.log: $(tail -n 5 "$dir/initdb.log")"
        local listen=127.0.0.1 also=${THROWAWAY_PG_ALSO_LISTEN:-}
        if [[ -n $also ]]; then
            [[ $also =~ ^[0-9.]+/[0-9]+$ ]] || die "THROWAWAY_PG_ALSO_LISTEN must be ADDR/PREFIX, got $also"
            listen="127.0.0.1,${also%/*}"
            echo "host all all $also trust" >>"$dir/data/pg_hba.conf"
        fi
        cat >>"$dir/data/postgresql.conf" <<EOF

# throwaway-postgres.sh
listen_addresses = '$listen'
unix_socket_directories = '$dir'
fsync = off
# A commit is written to the OS before it is acknowledged, so a killed server (the chaos tests
# SIGKILL it) keeps every row it acknowledged, as a real one does; only an OS crash, which no
# test makes, could lose it without fsync.
synchronous_commit = on
full_page_writes = off
max_connections = 200
# What a failed test shows of the store (driver/tests/kube.rs prints them): slow statements and
# lock waits, with each session's address (a pod's IP) and pid.
log_min_duration_statement = 1000
log_lock_waits = on
log_line_prefix = '%m [%p] %r %a '
EOF
    fi

    local attempt port="" low attempts=${THROWAWAY_PG_ATTEMPTS:-20} started=""
    low=$(ephemeral_low)
    for attempt in $(seq 1 "$attempts"); do
        port=${THROWAWAY_PG_PORT:-$((20000 + RANDOM % (low - 20000)))}
        if ! port_in_use "$port"; then
            : >"$dir/postgres.log"
            [[ $EUID -eq 0 ]] && chown "$owner" "$dir/postgres.log"
            if as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -o "-p $port" \
                -w -t 60 start >/dev/null 2>&1; then
                # Postgres starts when any one of its addresses binds: one that did not (its port
                # is some client socket's local port) would leave the URL's 127.0.0.1 refusing
                # connections, so that start counts as a taken port.
                if ! grep -qi 'could not create listen socket' "$dir/postgres.log"; then
                    started=yes
                    break
                fi
                as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
            elif ! grep -qiE 'could not (bind|create listen)|address already in use' "$dir/postgres.log"; then
                die "postgres did not start, see $dir/postgres.log: $(tail -n 5 "$dir/postgres.log")"
            fi
        fi
        if [[ -n ${THROWAWAY_PG_PORT:-} ]]; then
            # The one port asked for: a server killed a moment ago may still be releasing it.
            ((attempt < attempts)) || break
            sleep 0.25
        else
            echo "$prog: port $port taken, trying another (attempt $attempt)" >&2
        fi
    done
    if [[ -z $started ]]; then
        [[ -n ${THROWAWAY_PG_PORT:-} ]] &&
            die "port $port is taken on an address to listen on: $(grep -iE 'could not|in use' "$dir/postgres.log" 2>/dev/null | head -n 2 | tr '\n' ' ')"
        die "found no free port in $attempts attempts"
    fi

    local url="postgres://postgres@127.0.0.1:$port/postgres"
    echo "$url" >"$dir/database_url"
    echo "$prog: postgres listening on 127.0.0.1:$port and in $dir (log: $dir/postgres.log)" >&2
    echo "DATABASE_URL=$url"
}

cmd_stop() {
    bindir=$(find_bindir)
    if ! is_running; then
        echo "$prog: no server runs in $dir/data" >&2
        return 0
    fi
    as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
        as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 60 stop >/dev/null 2>&1 ||
        die "could not stop the server in $dir/data"
    rm -f "$dir/database_url"
    echo "$prog: stopped the server in $dir/data" >&2
}

cmd_url() {
    [[ -f $dir/database_url ]] || die "no server was started in $dir"
    echo "DATABASE_URL=$(cat "$dir/database_url")"
}

(($# == 2)) || usage
action=$1
owner=${THROWAWAY_PG_USER:-postgres}
mkdir -p "$2"
dir=$(cd "$2" && pwd -P)
[[ $dir =~ ^[A-Za-z0-9_./-]+$ ]] || die "DIR must be a plain path (letters, digits, _ . / -): $dir"
# The unix socket path ($dir/.s.PGSQL.NNNNN) must fit in 107 bytes.
((${#dir} <= 90)) || die "DIR is too long for a unix socket path (${#dir} > 90 characters): $dir"

case $action in
start) cmd_start ;;
stop) cmd_stop ;;
url) cmd_url ;;
*) usage ;;
esac
