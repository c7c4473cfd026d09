-- brokerguard outbox tables, version 5. Safe to run more than once (also over version
-- 1); Migrate runs it as one transaction under an advisory lock so concurrent starts
-- do not race, and first takes the claims' lock of the table when it exists, so that
-- a relay's claim waits for the migration instead of deadlocking with it. The last
-- statement marks the table with its version: Migrate reads that mark and, when the
-- schema is current, runs none of this (it would lock the live table for nothing).
SELECT pg_advisory_xact_lock(7362890145221);
SELECT pg_advisory_xact_lock(7362890, t::int)
FROM (SELECT to_regclass('brokerguard_outbox') AS t) AS found WHERE t IS NOT NULL;

CREATE TABLE IF NOT EXISTS brokerguard_outbox (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination       text        NOT NULL,   -- "broker:name", e.g. "kafka:orders"
    msg_key           bytea,                  -- NULL: no key
    payload           bytea       NOT NULL,
    headers           jsonb,                  -- [{"key": text, "value": base64}], NULL: none
    created_at        timestamptz NOT NULL,
    visible_after     timestamptz NOT NULL,   -- not claimed before this time
    attempts          integer     NOT NULL DEFAULT 0, -- publishes failed for the message's own reasons
    deferrals         integer     NOT NULL DEFAULT 0, -- claims given back, uncharged, for an unavailable destination
    first_deferred_at timestamptz,
    status            text        NOT NULL DEFAULT 'pending'
        CONSTRAINT brokerguard_outbox_status_check CHECK (status IN ('pending', 'published', 'dead')),
    last_error        text,
    lease_owner       text,                   -- the token of the claim holding the row
    lease_until       timestamptz,            -- when its hold ends
    settled_at        timestamptz             -- when it was published or became dead
);
-- Tables created before settled_at existed.
ALTER TABLE brokerguard_outbox ADD COLUMN IF NOT EXISTS settled_at timestamptz;

-- Claims walk each destination's pending rows in enqueue order, so a held
-- destination's backlog is never read; settled rows stay out of the index. The third
-- column is when the row's lease ends (-infinity: no lease), so that a claim passes
-- over the rows other claims lease inside the index, without reading them.
-- Version 4: the index of versions 1 to 3, on (destination, id) only, is replaced.
DO $$
DECLARE old regclass;
BEGIN
    SELECT i.indexrelid::regclass INTO old FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = 'brokerguard_outbox'::regclass AND c.relname LIKE '%\_pending' AND i.indnatts = 2;
    IF old IS NOT NULL THEN
        EXECUTE 'DROP INDEX ' || old::text;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS brokerguard_outbox_pending
    ON brokerguard_outbox (destination, id, (coalesce(lease_until, '-infinity'::timestamptz)))
    WHERE status = 'pending';
-- Per-key order: a row waits while an earlier pending row of its key waits for its
-- backoff (attempts > 0) or is leased. Only such rows are in this index, so the check
-- costs a claim one probe of a nearly empty index per row.
CREATE INDEX IF NOT EXISTS brokerguard_outbox_waiting_key
    ON brokerguard_outbox (destination, msg_key, id)
    WHERE status = 'pending' AND msg_key IS NOT NULL AND (attempts > 0 OR lease_owner IS NOT NULL);
-- Version 1 claimed by visible_after; nothing reads this index any more.
DROP INDEX IF EXISTS brokerguard_outbox_due;

-- One row per destination that is held: its rows are not claimed before held_until.
-- A claim after held_until takes the probe and extends held_until by its lease.
CREATE TABLE IF NOT EXISTS brokerguard_outbox_hold (
    destination text        PRIMARY KEY,
    held_until  timestamptz NOT NULL,
    held_since  timestamptz NOT NULL,     -- start of the outage: MaxCircuitDeferral counts from here
    probe_token text                      -- the claim that holds the probe, if any
);
-- Version 3: why a destination is held when it is unusable (empty for an outage).
ALTER TABLE brokerguard_outbox_hold ADD COLUMN IF NOT EXISTS reason text NOT NULL DEFAULT '';

-- Retention deletes settled rows oldest first; dead rows are paged from here too.
CREATE INDEX IF NOT EXISTS brokerguard_outbox_settled
    ON brokerguard_outbox (status, settled_at, id) WHERE status <> 'pending';

-- Dead rows by reason (the text of last_error before its first ': ', as
-- outbox.DeadReason has it): a dead-row listing or requeue filtered by reason reads
-- the rows of that reason only, so a reason that matches nothing costs nothing however
-- many dead rows there are.
CREATE INDEX IF NOT EXISTS brokerguard_outbox_dead_reason
    ON brokerguard_outbox ((split_part(coalesce(last_error, ''), ': ', 1)), id) WHERE status = 'dead';
-- Version 5: dead rows by destination, and by destination and reason, for the same
-- reason: a filter on a destination that has no dead row reads nothing.
CREATE INDEX IF NOT EXISTS brokerguard_outbox_dead_dest
    ON brokerguard_outbox (destination, id) WHERE status = 'dead';
CREATE INDEX IF NOT EXISTS brokerguard_outbox_dead_dest_rsn
    ON brokerguard_outbox (destination, (split_part(coalesce(last_error, ''), ': ', 1)), id) WHERE status = 'dead';

-- Version 5: relays that hold a session (outbox.Sessions). Each live relay's own
-- connection holds the session-level advisory lock (7362891, lock_key); a claim that
-- can take that lock knows the relay is gone (its process died, its connection
-- broke), deletes its row and frees the rows its claims (tokens starting with prefix)
-- still lease, without waiting for their leases to end.
CREATE TABLE IF NOT EXISTS brokerguard_outbox_relay (
    prefix   text        PRIMARY KEY,  -- its claim tokens start with this; it ends in '/'
    lock_key integer     NOT NULL,
    since    timestamptz NOT NULL
);
-- The leased rows by lease owner, in byte order, so that a gone relay's rows (a range
-- of tokens) and a claim's rows (one token) are found without reading the others.
-- Its predicate names the status so that the write-backs, which leave the status out
-- of their condition, never pick it over the primary key.
CREATE INDEX IF NOT EXISTS brokerguard_outbox_leased
    ON brokerguard_outbox ((lease_owner COLLATE "C")) WHERE status = 'pending' AND lease_owner IS NOT NULL;

COMMENT ON TABLE brokerguard_outbox IS 'brokerguard outbox schema 5';
