// Package leadership decides which node of a cluster is the primary: the one
// node that runs the message graph (listeners, lanes, sweeper). Every node
// runs the same lease loop, the Elector actor, against one row of the shared
// database, mf_leader_lease; a single node uses SingleNode instead, which is
// the leader of term 0 from the start.
//
// # The lease
//
// The row holds (owner, term, acquired_at, expires_at). All times in it are
// the database's clock, computed in the same statement that writes them, so
// no node's clock decides who may lead.
//
//   - Elect succeeds only when expires_at <= now: the lease expired, or its
//     holder resigned (set expires_at = now). It never preempts, not even its
//     own live lease. It sets owner, term+1 and expires_at = now + TTL.
//   - Elect fails while a single node (cluster disabled) runs on the schema,
//     whose zero fence holds until someone is elected (a node elected beside
//     it recovered and sent the rows it was still sending): the election takes
//     the single node's lock shared, without waiting, in its own
//     transaction, and elects nobody while it is not granted
//     (storage.ErrSingleNodeRunning; the follower says so at ERROR and tries
//     again every heartbeat). A renewal takes no such lock.
//   - Renew succeeds only for the same owner and term: expires_at = now + TTL.
//   - Every write of the graph carries the fence {owner, term} and checks it
//     against the row in the same transaction (storage.ErrFenced otherwise).
//
// # States
//
//	           elect ok (term T)
//	┌──────────┐ ───────────────────────▶ ┌────────────┐
//	│ follower │                          │ leader (T) │──┐ renew ok:
//	└──────────┘ ◀─────────────────────── └────────────┘◀─┘ window moves
//	   ▲    │      renew finds another          │
//	   │    │      owner/term; trust window     │ clean stop:
//	   └────┘      closes; a write is fenced    ▼ resign, leave
//	 lease live:                             (stopped)
//	 retry at min(heartbeat, remaining + 10ms),
//	 or at once on a resignation NOTIFY
//
// A follower attempts an election every heartbeat_seconds; when it finds a
// live lease it also learns, in the same statement, how long the lease has
// left on the database clock, and comes back just after it expires if that
// is sooner. On PostgreSQL a resignation NOTIFYs every follower, which
// attempts at once: a clean stop hands over in milliseconds.
//
// A leader renews every heartbeat_seconds. Each change is sent to root as
// Changed, in order: root runs promotion recovery and starts graph(T) on a
// gain (none if the fence refused the recovery: the term is already lost,
// and root tells the elector Fenced, naming that term: told late, after
// the elector lost it and won a newer one, it leaves the newer one be),
// and stops the graph, waiting for
// every listener to close its port, on a loss. Root may be busy when a loss is sent (draining the graph for a
// clean stop or a reload lasts up to the drain timeout, past TTL -
// fence_timeout), so a gain also carries Changed.Ended, which the elector
// closes the moment the term ends: it cancels graph(T)'s context at once,
// whatever root is doing, and root starts no graph for a term that has
// already ended.
//
// A panic in the elector makes root's supervisor restart it, and the new
// elector starts as a follower knowing nothing of the term held. The failed
// one, on its way out, ends that term as a fence would (reason "fenced":
// trust closed, Ended closed, the loss sent to root) but does not resign:
// root may still be stopping the graph, and the lease keeps any other node
// out until it expires. The new elector finds its own live lease and, like
// any follower, waits for it to expire. After more than 10 panics in 10 s
// the supervisor stops the elector instead: its Stopping then does the same
// (ends the term, reports the loss, does not resign), and root, told by
// actor.Terminated, stops the graph and the node, which can no longer take
// part in elections; the lease expires as after a crash. A graph stopped
// that way is the end of the term's work: root stops the node, resigning
// only once the graph and all its children have stopped, as a clean stop
// does, so no other node starts while any of this node's graph acts. A
// panic in root itself does the same: its supervisor would stop the graph
// and the elector at once (the elector's stop resigns), so root, told it
// is restarting, stops the graph first and fails the node, and the root
// that restarts spawns no elector. A graph that does not stop at all, an
// actor of it stuck in a call that never returns (a file inbound's
// directory on a dead hard-mounted NFS share), is given up at the drain
// timeout and 10 s more, its term's context cancelled by then: root
// resigns and stops the node. The stuck
// actor can act no more for the term (its context is cancelled), and any
// write it makes carries the old term, which the fence refuses once another
// node is elected.
//
// # The trust window, and why a fenced leader has stopped first
//
// The leader keeps a local window, on its monotonic clock:
//
//	trusted_until = start of the last successful attempt + leader_fence_timeout
//
// Every attempt is bounded by the window (its context's deadline is
// trusted_until), and a checkTrust message is armed for trusted_until. When
// the window closes without a newer success the node fences itself: it
// reports the loss, root stops the graph, and the Trust shared with the lanes
// closes, so no lane starts another send. The Trust also ends the term
// (closes Changed.Ended, which cancels the graph's context) on a timer of
// its own at that instant, whatever the elector is doing: a send already
// being written is cut off with the window even while the elector is held
// up in a call that ignores its deadline (else it ran on to the
// destination's timeout), and a window that lapsed stays closed for the
// rest of its term, so a renewal answered after it is a loss.
//
// Safety. Let a successful attempt start at local time s. The statement it
// sent runs on the database at some real time d >= s (it cannot run before
// it is sent) and sets expires_at = d + TTL. No other node can be elected
// before real time d + TTL >= s + TTL. This node stops trusting itself at
// s + fence_timeout. Since the config enforces
//
//	heartbeat_seconds < leader_fence_timeout_seconds < leader_lease_ttl_seconds
//
// the old leader stops at least TTL - fence_timeout before anyone else can
// start: with the defaults 30 - 20 = 10 s, of which the graph's stop must
// use only a part (it cancels every delivery in hand at once). Both bounds
// count elapsed time from the same instant, so neither clock's offset
// matters, only their rates, and the margin absorbs any drift between them.
//
// What the window cannot cover, the fence does: a process frozen (SIGSTOP,
// a VM pause) between its check and its action wakes with a stale term.
// Every database write it then attempts fails with ErrFenced and changes
// nothing, because the election that followed bumped the term, and the
// write checks the term in its own transaction while holding a lock that
// the election must wait for, so the election cannot commit in between. On
// PostgreSQL the fence holds the lease row FOR KEY SHARE, and an election,
// which changes term, a column with a unique index, waits for that lock. On
// SQL Server the fence holds shared the row of mf_leader_term, a copy of the
// lease's owner and term that a trigger on the lease updates in the
// election's own transaction (migration 0012), and the election waits for
// the exclusive lock its trigger needs there. Lanes also check the
// trust window before each send to a destination, and the sender asks it
// again at the last moment (lanes.Outgoing.MayWrite: once an MLLP
// connection is in hand, right before the frame's write; before an HTTP
// request, once one of the destination's connections is free; before a
// file's rename into place). For MLLP and files that leaves only a pause
// landing between that last check and the write itself, microseconds, not
// the wait for a connection the destination's lanes share, which can last
// seconds (a chaos run saw a node frozen in that wait write, on waking, a
// message the next leader had delivered with seven behind it). For HTTP
// it also leaves net/http's dial and TLS handshake, which come after the
// check, bounded by the destination's timeout_seconds: the places that
// could ask again there change what is written (a body net/http cannot
// tell is in memory has the request's head sent on its own, first) or,
// on a wrapped connection, would fail the HTTP/2 streams that share it.
// At least once, by design.
//
// # Liveness: a frozen leader must not hold the lease row
//
// The fence's lock (on the lease row; on SQL Server on the term row) lives
// as long as its transaction. A leader frozen in the middle of one keeps
// it, and the next election would wait behind it for as long as the freeze
// lasts.
// On PostgreSQL a clustered node's sessions therefore carry
// idle_in_transaction_session_timeout = leader_fence_timeout: the server
// ends a session that sits inside a transaction that long, releasing its
// locks. A fenced write may begin as late as the trust window's end, s +
// fence_timeout (s the start of the last renewal), so its lock is gone by
// s + 2 * fence_timeout, which with the defaults is 10 s after the lease
// can expire (s + TTL): the next election may wait that much longer for it
// (liveness only: it waits for that lock, see Safety). A timeout of TTL -
// fence_timeout would end the sessions of a merely slow client at short
// timings (fence 2 s, TTL 3 s: 1 s). None of the engine's
// transactions waits on anything but the database (no delivery happens
// inside one), so only a frozen or cut-off client ever meets the timeout.
// The timeout covers a session idle between a transaction's statements,
// not one frozen in the middle of a pipelined batch (the fence and its
// writes sent with one Sync at the end): until the server has answered a
// Sync, the session counts as active and no timeout runs. A leader cut
// off after the fence of such a batch reached the server and before its
// Sync did is dropped by TCP keepalive, which the sessions set to end a
// silent client within about the fence timeout, and by tcp_user_timeout
// (PostgreSQL 12 and later), set to the same, when the server has sent it
// results it never acknowledged: keepalive probes nothing then, and the
// retransmissions alone would hold the row for about 15 minutes. One frozen
// there (its kernel still answering keepalives and acknowledging) holds the
// lock as SQL Server's sessions do. The window is the time to write
// one batch, short unless the batch is larger than the socket's buffer (an
// ingest batch of large messages). SQL Server has no such setting at all:
// there a frozen node delays elections until
// its connections drop (a paused VM, a cut network: once the server's TCP
// keepalive gives up) or, for a stopped process whose kernel still answers
// keepalives, until it resumes or dies. Safety holds either way: the frozen
// transaction commits before the election can, or not at all.
// Nor does either timeout cover a statement waiting on a lock (a queue row
// an operator's open transaction holds): its backend is active and reads
// nothing from its socket, so a leader killed or cut off while one of its
// writes waited held the lease row for as long as that other lock was
// held, hours if the operator's session stayed open. The sessions
// therefore also carry client_connection_check_interval = 1 s (PostgreSQL
// 14 and later, on Linux and the BSDs): the server looks for the client
// during the wait, and ends the backend once its socket is closed (the
// kernel's, at a process's death) or given up by keepalive.
//
// A live leader's renewal must not wait behind its own writes either. With
// the lease row held shared, a write that waited on anything (a maintenance
// lock on a table, a row an operator's open session holds, a slow
// statement) held the renewal too, and the leader fenced itself for as long
// as the wait lasted. On PostgreSQL the fence therefore holds the row FOR
// KEY SHARE (migration 0009), which an election waits for and a renewal or
// a resignation (they change expires_at only) does not; and it takes the
// graph's tables before the lease row (migration 0008), so that a write
// waiting for maintenance holds no lock on the row at all. Nor does the
// renewal wait for a connection: the lease has one of its own, apart from
// the pool that such waiting writes and reads may fill. On SQL Server the
// fence held the lease row shared until migration 0012, and every UPDATE
// of that row, the renewal's too, waited for it; it now holds the row of
// mf_leader_term instead, which only an election writes (its trigger on
// the lease copies owner and term there when they change, whatever version
// of mf elected), so a renewal or a resignation, which change neither,
// locks the lease row only and waits for no fenced write. This has not run
// against a SQL Server here: its tests (storage/sqlserver,
// TestARowLockHoldsALaneWriteButNotTheRenewal and
// TestAnElectionWaitsForTheFencedWritesInProgress) run when
// MF_TEST_SQLSERVER_URL is set.
//
// # Clocks
//
// A node's wall clock decides none of this: leases, row leases, retry due
// times and heartbeats are stamped and compared by the database, on its clock,
// and Go passes it durations only; the trust window and every local timer
// run on the monotonic clock, which an NTP step does not move.
//
// The database server's clock does matter, since the argument above takes
// it to run at the rate of real time. A step forward by X shortens every
// live lease by X: a standby can be elected while the old leader still
// trusts its window (its next renewal, or its next write, finds the newer
// term: each lane may send the row in hand once more, a duplicate), and a
// delivery's row lease can run out under it. A step back by X lengthens
// them by X: a crashed leader is replaced, and a retry or a stranded row
// comes due, X later (POST /queue/{id}/retry makes a row due at once). So
// the database server's clock should be slewed, never stepped. A single
// node's database (SQLite) uses the node's own clock the same way.
//
// The monotonic clock (Linux CLOCK_MONOTONIC) does not count time the
// machine spends suspended, and a hypervisor may hide a VM's pause from it
// too: such a leader resumes with its window still open, and until its
// renewal or a write finds the newer term each lane may send once, as above.
//
// # Membership and config
//
// With each attempt the elector writes its heartbeat to mf_nodes (best
// effort: membership informs operators, it never decides who leads) and
// reads the shared config version; when another node's `mf reload` bumped
// it, root reloads this node's own config file and restarts its graph.
// The heartbeat carries the fingerprint of the graph config in force, and
// the membership read before it is compared (drift.go): the primary warns
// of every live node whose graph config differs from its own, and each
// node's mf_config_drift says whether its own differs from the primary's.
// Once a minute the elector also reads the applied migrations, to warn
// once when a newer mf has migrated the database under it.
// A clean stop resigns the lease (a few bounded attempts; expiry is the
// fallback) and marks the node left.
package leadership
