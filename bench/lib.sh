# Helpers the bench/ scripts share; source it after setting PGURL.

# say prints a heading on stderr.
say() { printf '\n== %s\n' "$*" >&2; }
# freeport prints a TCP port free on 127.0.0.1.
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# waitport PORT waits up to 30 s for something to listen on 127.0.0.1:PORT.
waitport() { for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "nothing listens on $1" >&2; return 1; }
# dburl NAME prints PGURL with its database replaced by NAME.
dburl() { python3 -c "import sys,urllib.parse as u; p=u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path='/'+sys.argv[2])))" "$PGURL" "$1"; }
# walsyncs prints how many times PostgreSQL has flushed its WAL to disk
# (pg_stat_wal.wal_sync, server-wide, PostgreSQL 14 and later).
walsyncs() { psql "$PGURL" -Atc "SELECT wal_sync FROM pg_stat_wal"; }
