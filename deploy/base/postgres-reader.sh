#!/bin/sh
# Run once when the store's database is created (/docker-entrypoint-initdb.d, as the official
# postgres image and docker/postgres do): the read-only role of `driver serve`. SELECT on every
# table now, and by default privileges on every table the store's owner creates later (the
# driver's migrations), so a new migration's table is readable without a grant of its own.
# Its sessions are read-only too. No CREATE on schema public (PostgreSQL 15's default).
set -eu
if [ -z "${POSTGRES_READER_PASSWORD:-}" ]; then
    echo "postgres-reader.sh: POSTGRES_READER_PASSWORD is empty; no reader role" >&2
    exit 0
fi
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v reader_password="$POSTGRES_READER_PASSWORD" -v db="$POSTGRES_DB" \
    -v owner="$POSTGRES_USER" <<'SQL'
CREATE ROLE triton_reader LOGIN PASSWORD :'reader_password';
ALTER ROLE triton_reader SET default_transaction_read_only = on;
GRANT CONNECT ON DATABASE :"db" TO triton_reader;
GRANT USAGE ON SCHEMA public TO triton_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO triton_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT ON TABLES TO triton_reader;
SQL
echo "postgres-reader.sh: created role triton_reader (read-only)"
