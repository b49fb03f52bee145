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
# and the time they have had in all, in seconds, from one read, so that the
# busy share of an interval does not depend on when a loaded machine ran
# this. All is the time since boot (/proc/uptime) times the cores; busy is
# all less /proc/stat's idle, iowait and steal. Not the sum of its user,
# system and irq fields: on a tickless kernel those are sampled at the
# timer tick, which misses short bursts of work between idle periods, while
# idle is timed exactly; a lock-step run is such bursts, and its processes'
# own CPU time (cpuof, which the scheduler times exactly) came out above the
# cores' busy time by a tenth.
busy() { awk -v hz="$(getconf CLK_TCK)" -v n="$(getconf _NPROCESSORS_ONLN)" 'FNR == NR {up = $1; next} /^cpu / {printf "%.2f:%.2f\n", up * n - ($5+$6+$9)/hz, up * n}' /proc/uptime /proc/stat; }
# cpuof PID prints the CPU time (user and system) that PID has used, in seconds.
cpuof() { awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); print ($12+$13)/hz}' "/proc/$1/stat"; }
# switches PID prints how many times the threads of PID have been switched
# off their core (voluntary and not) so far: a message that hands over
# between goroutines on different threads costs such switches.
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {n += $2} END {print n + 0}'; }
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
# pglatency FILE...: the p50 and p99 latency, in ms, of the transactions of
# pgbench per-transaction logs (-l) of an open-loop run (-R), as "p50 p99",
# nearest-rank (the ceil(q*n)-th smallest) and counted from each
# transaction's scheduled start, as mf bench's are. With
# -R the log's time (its third column) already runs from the schedule
# (pgbench takes now - txn_scheduled): the schedule lag beside it (the
# seventh) is a part of it, not to be added.
pglatency() {
  cat "$@" | awk '{print $3 / 1000}' | sort -n |
    awk 'function rank(q,  r) {r = int(NR * q); if (r < NR * q) r++; return r < 1 ? 1 : r}
      {a[NR] = $1} END {if (NR == 0) exit 1; printf "%.2f %.2f\n", a[rank(0.50)], a[rank(0.99)]}'
}
