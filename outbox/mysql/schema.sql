-- brokerguard outbox tables for MySQL 8.0.1+ and MariaDB 10.6+, schema 1. Each
-- statement can run more than once. Migrate runs them under a named lock
-- (GET_LOCK), with lock_wait_timeout bounding the wait for each table's metadata
-- lock, and runs none of them when the tables carry this schema's comment already.

CREATE TABLE IF NOT EXISTS brokerguard_outbox (
    id                BIGINT       NOT NULL AUTO_INCREMENT,
    destination       VARBINARY(300) NOT NULL,  -- "broker:name", e.g. "kafka:orders"
    msg_key           LONGBLOB,                 -- NULL: no key
    key_hash          BIGINT,                   -- first 8 bytes of SHA-256(msg_key); NULL: no key
    payload           LONGBLOB     NOT NULL,
    headers           LONGBLOB,                 -- JSON [{"key": text, "value": base64}]; NULL: none
    created_at        DATETIME(6)  NOT NULL,    -- UTC, from the enqueuer's clock
    visible_after     DATETIME(6)  NOT NULL,    -- not claimed before this time
    attempts          INT          NOT NULL DEFAULT 0, -- publishes failed for the message's own reasons
    deferrals         INT          NOT NULL DEFAULT 0, -- claims given back, uncharged, for an unavailable destination
    first_deferred_at DATETIME(6),
    status            VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
    last_error        LONGBLOB,
    lease_owner       VARBINARY(255),           -- the token of the claim holding the row
    lease_until       DATETIME(6),              -- when that claim's lease ends
    settled_at        DATETIME(6),              -- when it was published or became dead
    -- outbox.DeadReason of a dead row's last_error (the text before its first ': '),
    -- NULL for the other rows: the dead-row pages, counts and requeues by reason read
    -- the index on it. A stored generated column, as both engines index one.
    dead_reason       VARBINARY(255) GENERATED ALWAYS AS
        (IF(status = 'dead', LEFT(SUBSTRING_INDEX(COALESCE(last_error, ''), ': ', 1), 255), NULL)) STORED,
    PRIMARY KEY (id),
    -- Claims read each destination's pending rows in enqueue order.
    KEY brokerguard_pending (status, destination, id),
    -- Per-key order: the earlier pending rows of one destination and key.
    KEY brokerguard_key (status, destination, key_hash, id),
    -- Retention deletes settled rows oldest first.
    KEY brokerguard_settled (status, settled_at, id),
    KEY brokerguard_dead_reason (dead_reason, id),
    CHECK (status IN ('pending', 'published', 'dead'))
) ENGINE = InnoDB COMMENT = 'brokerguard outbox, schema 1';

-- One row per held destination: its rows are not claimed before held_until. A claim
-- after held_until takes the probe and extends held_until by its lease.
CREATE TABLE IF NOT EXISTS brokerguard_outbox_hold (
    destination VARBINARY(300) NOT NULL,
    held_until  DATETIME(6)    NOT NULL,
    held_since  DATETIME(6)    NOT NULL,  -- start of the outage: MaxCircuitDeferral counts from here
    probe_token VARBINARY(255),           -- the claim that holds the probe, if any
    reason      LONGBLOB       NOT NULL,  -- why the destination is unusable; empty for an outage
    PRIMARY KEY (destination)
) ENGINE = InnoDB COMMENT = 'brokerguard outbox, schema 1';

-- The row every claim locks first, so that claims of one table run one at a time.
CREATE TABLE IF NOT EXISTS brokerguard_outbox_lock (
    name VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB COMMENT = 'brokerguard outbox, schema 1';
