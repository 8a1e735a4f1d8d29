#!/bin/sh
# Entry point of triton-stress/postgres:dev. With an empty $PGDATA: initdb (superuser $POSTGRES_USER,
# password $POSTGRES_PASSWORD, scram-sha-256 for every TCP client), then create $POSTGRES_DB and run
# /docker-entrypoint-initdb.d/*.sh (as the official image does). Then exec
# postgres listening on every address (extra arguments are passed to it, e.g. -c max_connections=200).
set -eu
: "${PGDATA:=/var/lib/postgresql/data/pgdata}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
export PGDATA

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "entrypoint: POSTGRES_PASSWORD is empty; refusing to initialise a database without a password" >&2
        exit 2
    fi
    mkdir -p "$PGDATA"
    chmod 700 "$PGDATA"
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256
    rm -f "$pwfile"
    # initdb's pg_hba.conf only lets in loopback clients; every pod of the cluster is remote.
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        # single-user mode: no server listens while the database is made
        echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" \
            | postgres --single -D "$PGDATA" -j postgres > /dev/null
    fi
    # /docker-entrypoint-initdb.d/*.sh, as the official image runs them: once, against a server
    # on the socket only, with the POSTGRES_* environment (deploy/'s postgres-reader.sh).
    if ls /docker-entrypoint-initdb.d/*.sh > /dev/null 2>&1; then
        pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" start
        export POSTGRES_USER POSTGRES_DB PGHOST=/var/run/postgresql
        for script in /docker-entrypoint-initdb.d/*.sh; do
            echo "entrypoint: running $script"
            if [ -x "$script" ]; then "$script"; else . "$script"; fi
        done
        unset PGHOST
        pg_ctl -D "$PGDATA" -w -m fast stop
    fi
    echo "entrypoint: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql "$@"
