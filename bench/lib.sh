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
# busy prints "BUSY:ALL": the CPU time all cores have spent busy since boot
# (/proc/stat's user, nice, system, irq and softirq) and in all (idle, iowait
# and steal too), in seconds, from one read, so that the busy share of an
# interval does not depend on when a loaded machine ran this.
busy() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / {printf "%.2f:%.2f\n", ($2+$3+$4+$7+$8)/hz, ($2+$3+$4+$5+$6+$7+$8+$9)/hz}' /proc/stat; }
# cpuof PID prints the CPU time (user and system) that PID has used, in seconds.
cpuof() { awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); print ($12+$13)/hz}' "/proc/$1/stat"; }
# timed FILE CMD...: runs CMD, then writes the CPU time (user and system) it
# used to FILE, in seconds, and exits with its status. SIGINT and SIGTERM are
# passed on to CMD, so that a kill of this process stops CMD too.
timed() {
  python3 -c '
import resource, signal, subprocess, sys
p = subprocess.Popen(sys.argv[2:])
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, lambda n, f: p.send_signal(n))
rc = p.wait()
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{r.ru_utime + r.ru_stime}\n")
sys.exit(rc)' "$@"
}
