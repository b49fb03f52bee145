-- The leader lease: exactly one row. It starts never elected (owner '', term
-- 0), which is the only state the zero (single-node) fence matches.
CREATE TABLE mf_leader_lease (
    name        text        PRIMARY KEY CHECK (name = 'leader'),
    owner       text        NOT NULL DEFAULT '',
    term        bigint      NOT NULL DEFAULT 0,
    acquired_at timestamptz NOT NULL DEFAULT 'epoch',
    expires_at  timestamptz NOT NULL DEFAULT 'epoch'
);
INSERT INTO mf_leader_lease (name) VALUES ('leader');

CREATE TABLE mf_nodes (
    node_id        text        PRIMARY KEY,
    host           text        NOT NULL,
    pid            bigint      NOT NULL,
    status         text        NOT NULL CHECK (status IN ('active', 'left')),
    started_at     timestamptz NOT NULL,
    last_seen      timestamptz NOT NULL,
    is_leader      boolean     NOT NULL DEFAULT false,
    config_version bigint      NOT NULL DEFAULT 0
);

CREATE TABLE mf_messages (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbound      text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    control_id   text        NOT NULL DEFAULT '',
    message_type text        NOT NULL DEFAULT '',
    payload      bytea       NOT NULL,
    status       text        NOT NULL CHECK (status IN ('routed', 'unrouted', 'rejected')),
    error        text        NOT NULL DEFAULT ''
);
CREATE INDEX mf_messages_received_at ON mf_messages (received_at);

CREATE TABLE mf_queue (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id       bigint      NOT NULL REFERENCES mf_messages (id),
    destination      text        NOT NULL,
    lane             text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'inflight', 'done', 'dead')),
    attempts         bigint      NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text        NOT NULL DEFAULT '',
    lease_expires_at timestamptz,
    last_error       text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
-- The lane head: lowest id of a lane among rows not finished.
CREATE INDEX mf_queue_lane_head ON mf_queue (lane, id) WHERE status IN ('pending', 'inflight');
-- The expired-lease sweep and promotion recovery.
CREATE INDEX mf_queue_inflight ON mf_queue (lease_expires_at) WHERE status = 'inflight';
-- Retention purge.
CREATE INDEX mf_queue_finished ON mf_queue (updated_at) WHERE status IN ('done', 'dead');
CREATE INDEX mf_queue_message ON mf_queue (message_id);
-- Dead-row counts per destination without scanning finished rows.
CREATE INDEX mf_queue_dead ON mf_queue (destination) WHERE status = 'dead';

CREATE TABLE mf_config (
    name    text   PRIMARY KEY,
    version bigint NOT NULL
);
