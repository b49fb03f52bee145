-- The schema of storage/postgres/migrations/0001_init.sql in SQLite types.
--
-- Times are INTEGER Unix milliseconds on the database clock (SQLite's 'now'
-- has millisecond precision), so that they compare and subtract as plain
-- integers; 0 is the epoch. Tables are STRICT, so a value of the wrong type
-- is an error rather than silently stored. Ids are INTEGER PRIMARY KEY
-- AUTOINCREMENT so that an id is never reused, even after the highest rows
-- have been purged: a lane's order is its ids' order.

-- The leader lease: exactly one row. It starts never elected (owner '', term
-- 0), which is the only state the zero (single-node) fence matches.
CREATE TABLE mf_leader_lease (
    name        TEXT    NOT NULL PRIMARY KEY CHECK (name = 'leader'),
    owner       TEXT    NOT NULL DEFAULT '',
    term        INTEGER NOT NULL DEFAULT 0,
    acquired_at INTEGER NOT NULL DEFAULT 0,
    expires_at  INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO mf_leader_lease (name) VALUES ('leader');

CREATE TABLE mf_nodes (
    node_id        TEXT    NOT NULL PRIMARY KEY,
    host           TEXT    NOT NULL,
    pid            INTEGER NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('active', 'left')),
    started_at     INTEGER NOT NULL,
    last_seen      INTEGER NOT NULL,
    is_leader      INTEGER NOT NULL DEFAULT 0 CHECK (is_leader IN (0, 1)),
    config_version INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE mf_messages (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    inbound      TEXT    NOT NULL,
    received_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    control_id   TEXT    NOT NULL DEFAULT '',
    message_type TEXT    NOT NULL DEFAULT '',
    payload      BLOB    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('routed', 'unrouted', 'rejected')),
    error        TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX mf_messages_received_at ON mf_messages (received_at);

CREATE TABLE mf_queue (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id       INTEGER NOT NULL REFERENCES mf_messages (id),
    destination      TEXT    NOT NULL,
    lane             TEXT    NOT NULL,
    status           TEXT    NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'inflight', 'done', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    lease_owner      TEXT    NOT NULL DEFAULT '',
    lease_expires_at INTEGER,
    last_error       TEXT    NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    updated_at       INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
) STRICT;
-- The lane head: lowest id of a lane among rows not finished. Queries must
-- repeat this WHERE term verbatim for SQLite to use the partial index.
CREATE INDEX mf_queue_lane_head ON mf_queue (lane, id) WHERE status IN ('pending', 'inflight');
-- The expired-lease sweep and promotion recovery.
CREATE INDEX mf_queue_inflight ON mf_queue (lease_expires_at) WHERE status = 'inflight';
-- Retention purge.
CREATE INDEX mf_queue_finished ON mf_queue (updated_at) WHERE status IN ('done', 'dead');
CREATE INDEX mf_queue_message ON mf_queue (message_id);
-- Dead-row counts per destination without scanning finished rows.
CREATE INDEX mf_queue_dead ON mf_queue (destination) WHERE status = 'dead';

CREATE TABLE mf_config (
    name    TEXT    NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
) STRICT;
