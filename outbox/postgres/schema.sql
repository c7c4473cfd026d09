-- brokerguard outbox table, version 1. Safe to run more than once; Migrate runs it as
-- one transaction under an advisory lock so concurrent starts do not race.
SELECT pg_advisory_xact_lock(7362890145221);

CREATE TABLE IF NOT EXISTS brokerguard_outbox (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination       text        NOT NULL,   -- "broker:name", e.g. "kafka:orders"
    msg_key           bytea,                  -- NULL: no key
    payload           bytea       NOT NULL,
    headers           jsonb,                  -- [{"key": text, "value": base64}], NULL: none
    created_at        timestamptz NOT NULL,
    visible_after     timestamptz NOT NULL,   -- not claimed before this time
    attempts          integer     NOT NULL DEFAULT 0, -- failed publishes
    deferrals         integer     NOT NULL DEFAULT 0, -- batches skipped for an open circuit
    first_deferred_at timestamptz,
    status            text        NOT NULL DEFAULT 'pending'
        CONSTRAINT brokerguard_outbox_status_check CHECK (status IN ('pending', 'published', 'dead')),
    last_error        text,
    lease_owner       text,                   -- the dispatcher holding the row
    lease_until       timestamptz,            -- when its hold ends
    settled_at        timestamptz             -- when it was published or became dead
);
-- Tables created before settled_at existed.
ALTER TABLE brokerguard_outbox ADD COLUMN IF NOT EXISTS settled_at timestamptz;

-- Claims scan pending rows by visible_after; settled rows stay out of the index.
-- created_at lets Backlog read the oldest pending row from the index alone.
CREATE INDEX IF NOT EXISTS brokerguard_outbox_due
    ON brokerguard_outbox (visible_after, id) INCLUDE (created_at) WHERE status = 'pending';

-- Retention deletes settled rows oldest first; dead rows are paged from here too.
CREATE INDEX IF NOT EXISTS brokerguard_outbox_settled
    ON brokerguard_outbox (status, settled_at, id) WHERE status <> 'pending';
