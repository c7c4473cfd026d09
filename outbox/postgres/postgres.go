// Package postgres is an outbox.Store on PostgreSQL, through pgx v5.
//
// Rows live in the table brokerguard_outbox, and held destinations in
// brokerguard_outbox_hold, created by Migrate from the embedded Schema (or by the
// caller's own migration tool from the same SQL). Applications
// enqueue inside their own transaction, pgx or database/sql:
//
//	tx, _ := pool.Begin(ctx)
//	// ... the business change ...
//	store.Enqueue(ctx, postgres.Pgx(tx), outbox.Entry{Destination: d, Message: m})
//	tx.Commit(ctx) // the row exists exactly when the change does
//
// Dispatchers claim due rows with SELECT ... FOR UPDATE SKIP LOCKED and a lease
// (lease_owner holds the claim's token, lease_until its end), so any number of them
// can share the table; a crashed dispatcher's rows are claimable again when their
// lease ends. A claim walks each destination's pending rows in id order through an
// index, skipping held destinations without reading their rows, so a held backlog
// costs a claim nothing. Every time decision
// uses the time the Processor passes in, never the server's clock, so tests can run
// on a fake clock; dispatchers sharing a table need clocks that agree to well within
// the lease.
package postgres

import (
	"cmp"
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

// Schema is the SQL that creates the outbox table and its index. It can be run more
// than once.
//
//go:embed schema.sql
var Schema string

// Table is the name of the outbox table.
const Table = "brokerguard_outbox"

// HoldTable is the name of the table of held destinations.
const HoldTable = "brokerguard_outbox_hold"

// Execer runs a statement; *pgxpool.Pool, *pgx.Conn and pgx.Tx are Execers.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate brings the outbox tables and their indexes to this version's schema, so
// that every relay can run it at start-up during a rolling deploy. Of the options only
// WithTable matters here.
//
// When the table already carries this version's mark (SchemaVersion), Migrate reads
// that one catalog row and returns: it takes no lock, so relays starting beside open
// business transactions and running claims wait for nothing. Otherwise it runs
// SchemaFor in one transaction under an advisory lock (concurrent starts take turns),
// after the table's claims' lock (a claim waits for the migration rather than
// deadlocking with it), with every lock wait bounded by MigrateLockTimeout: a
// migration that would queue behind a long transaction, and hold every Enqueue behind
// its own queued request meanwhile, gives up its place at once and tries again after
// a short pause, until ctx ends or MigrateAttempts tries have failed. The indexes a
// new version adds are built while writes wait (CREATE INDEX, not CONCURRENTLY, so
// that the whole migration is one transaction); docs/outbox-database.md says how to
// build them beforehand on a large table.
//
// db is usually a *pgxpool.Pool; with an Execer that cannot read (none of pgx's
// types) the version is not checked and the schema runs every time.
func Migrate(ctx context.Context, db Execer, opts ...Option) error {
	var s Store
	for _, o := range opts {
		o(&s)
	}
	if r, ok := db.(rowQuerier); ok {
		current, err := schemaCurrent(ctx, r, s.table)
		if err != nil {
			return fmt.Errorf("postgres: migrate: reading the schema's version: %w", err)
		}
		if current {
			return nil
		}
	}
	script := migrateSetup + SchemaFor(s.table)
	pause := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		_, err := db.Exec(ctx, script)
		if err == nil {
			return nil
		}
		var pe *pgconn.PgError
		waited := errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "40P01") // lock_not_available, deadlock_detected
		if !waited || attempt == MigrateAttempts || ctx.Err() != nil {
			return fmt.Errorf("postgres: migrate (try %d): %w", attempt, err)
		}
		t := time.NewTimer(pause + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("postgres: migrate (try %d): %w", attempt, err)
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// SchemaVersion is the version of Schema, which Migrate writes as the table's comment
// ("brokerguard outbox schema 5") and reads back to skip a schema that is current.
const SchemaVersion = 5

// MigrateLockTimeout bounds each lock wait of a migration; MigrateAttempts bounds its
// tries. An Enqueue that arrives while a migration waits for the table queues behind
// it for at most MigrateLockTimeout.
const (
	MigrateLockTimeout = 200 * time.Millisecond
	MigrateAttempts    = 100
)

// migrateSetup bounds the lock waits of the migration's transaction.
var migrateSetup = "SELECT set_config('lock_timeout', '" + strconv.FormatInt(MigrateLockTimeout.Milliseconds(), 10) + "ms', true);\n"

// rowQuerier is what Migrate needs to read the schema's version: *pgxpool.Pool,
// *pgx.Conn and pgx.Tx have it.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaCurrent reports whether table t carries this version's mark. It reads the
// catalogs only: to_regclass and obj_description take no lock on the table.
func schemaCurrent(ctx context.Context, db rowQuerier, t TableName) (bool, error) {
	var current bool
	err := db.QueryRow(ctx, `SELECT coalesce(obj_description(to_regclass($1), 'pg_class') = $2, false)`,
		t.String(), schemaMark).Scan(&current)
	return current, err
}

// schemaMark is the comment the schema's last statement puts on the table.
var schemaMark = "brokerguard outbox schema " + strconv.Itoa(SchemaVersion)

// DB is the connection pool the Store works on; *pgxpool.Pool is one. Each method
// call runs its statements on their own (no transaction is held between calls).
type DB interface {
	Execer
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ErrNotFound is returned by Get for an id with no row.
var ErrNotFound = errors.New("postgres: outbox row not found")

// Option configures a Store.
type Option func(*Store)

// WithClock makes Enqueue, Backlog and Fail (the time a row becomes dead) read time
// from c (default time.Now). Give it the Processor's clock.
func WithClock(c breaker.Clock) Option { return func(s *Store) { s.clock = c } }

// WithoutNotify stops Enqueue from sending the NOTIFY that wakes Listeners, and
// gives the Store no CommitWaker: the polling-only mode, for a Store behind a pooler
// in transaction mode (PgBouncer's pool_mode=transaction), where LISTEN receives
// nothing. PostgreSQL serializes the commits of transactions that sent a
// NOTIFY, which a database taking thousands of enqueueing commits a second may feel.
func WithoutNotify() Option { return func(s *Store) { s.quiet = true } }

// WithMaxEntryBytes makes Enqueue refuse (outbox.ErrTooLarge) an entry whose key,
// value and headers pass n bytes, instead of its broker's default limit
// (storekit.DefaultMaxEntryBytes): for a broker configured to take larger messages.
func WithMaxEntryBytes(n int) Option { return func(s *Store) { s.maxEntry = n } }

// Store is an outbox.Store on a PostgreSQL table. It is safe for concurrent use.
type Store struct {
	db           DB            // bounded by the timeout (deadline.go)
	pool         *pgxpool.Pool // the DB given to New, when it is a pool: CommitWaker listens on it
	clock        breaker.Clock
	table        TableName
	quiet        bool // no NOTIFY on Enqueue, no CommitWaker
	maxEntry     int  // WithMaxEntryBytes; 0: storekit.DefaultMaxEntryBytes
	timeout      time.Duration
	timeoutSet   bool
	stmts        *statements
	claimLock    string // the statement that takes the claims' lock (claimSetup)
	exactBacklog bool   // WithExactBacklog
}

var (
	_ outbox.Store       = (*Store)(nil)
	_ outbox.Purger      = (*Store)(nil)
	_ outbox.DeadLetters = (*Store)(nil)
	_ outbox.CommitWaker = (*Store)(nil)
)

// New returns a Store on db. The table must exist (see Migrate).
func New(db DB, opts ...Option) *Store {
	s := &Store{}
	for _, o := range opts {
		o(s)
	}
	if !s.timeoutSet {
		s.timeout = DefaultTimeout
	}
	s.pool, _ = db.(*pgxpool.Pool)
	s.db = newBoundedDB(db, s.timeout)
	s.stmts = &statements{t: s.table}
	// The table's name is made of identifier characters, quotes and a dot only
	// (NewTableName). Resolved at each claim, through the search_path when it has no
	// schema, it names the table itself: two tables called alike in two schemas do not
	// share a lock.
	s.claimLock = "SELECT pg_advisory_xact_lock(" + strconv.Itoa(claimLockClass) + ", '" + s.table.String() + "'::regclass::int)"
	return s
}

// sql returns stmt, written for Table, for the Store's table.
func (s *Store) sql(stmt string) string { return s.stmts.sql(stmt) }

func (s *Store) now() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// Tx is the caller's transaction that Enqueue writes in. Make one with Pgx or SQL.
type Tx interface {
	insert(ctx context.Context, sql string, args ...any) ([]int64, error)
}

// PgxQuerier is what Pgx needs: pgx.Tx, and also *pgx.Conn and *pgxpool.Pool for
// callers that enqueue outside a transaction.
type PgxQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// SQLQuerier is what SQL needs: *sql.Tx, and also *sql.DB and *sql.Conn. The
// connection must come from the pgx driver (github.com/jackc/pgx/v5/stdlib), which
// takes Go slices as PostgreSQL arrays.
type SQLQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Pgx adapts a pgx transaction for Enqueue.
func Pgx(tx PgxQuerier) Tx { return pgxTx{tx} }

// SQL adapts a database/sql transaction for Enqueue.
func SQL(tx SQLQuerier) Tx { return sqlTx{tx} }

type pgxTx struct{ q PgxQuerier }

func (t pgxTx) insert(ctx context.Context, sql string, args ...any) ([]int64, error) {
	rows, err := t.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

type sqlTx struct{ q SQLQuerier }

func (t sqlTx) insert(ctx context.Context, query string, args ...any) (ids []int64, err error) {
	rows, err := t.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { err = firstErr(err, rows.Close()) }()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

const enqueueSQL = `
INSERT INTO ` + Table + ` (destination, msg_key, payload, headers, created_at, visible_after)
SELECT u.destination, u.msg_key, u.payload, u.headers::jsonb, $5, $5
FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[]) WITH ORDINALITY
     AS u(destination, msg_key, payload, headers, ord)
ORDER BY u.ord
RETURNING id`

// enqueueNotifySQL is enqueueSQL that also notifies $6 in the same round trip. The
// CTE is materialized, so pg_notify runs once whatever the number of rows; PostgreSQL
// delivers the notification when the transaction commits, and never if it rolls back.
const enqueueNotifySQL = `
WITH wake AS MATERIALIZED (SELECT pg_notify($6, ''))
INSERT INTO ` + Table + ` (destination, msg_key, payload, headers, created_at, visible_after)
SELECT u.destination, u.msg_key, u.payload, u.headers::jsonb, $5, $5
FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[]) WITH ORDINALITY
     AS u(destination, msg_key, payload, headers, ord), wake
ORDER BY u.ord
RETURNING id`

// header is the JSON form of a transport.Header; encoding/json writes Value in base64.
type header struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// Enqueue inserts pending rows, visible at once, in tx and returns their ids in entry
// order. The rows exist only if tx commits; then, unless WithoutNotify, the table's
// Listeners are woken. Every entry must be valid (storekit.ValidateEntry, with the
// size limit of WithMaxEntryBytes if given); otherwise nothing is inserted.
func (s *Store) Enqueue(ctx context.Context, tx Tx, entries ...outbox.Entry) ([]int64, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	dests := make([]string, len(entries))
	keys := make([][]byte, len(entries))
	payloads := make([][]byte, len(entries))
	headers := make([]*string, len(entries))
	for i, e := range entries {
		if err := storekit.ValidateEntry(e, s.maxEntry); err != nil {
			return nil, fmt.Errorf("postgres: enqueue entry %d: %w", i, err)
		}
		dests[i], keys[i], payloads[i] = e.Destination.String(), e.Message.Key, e.Message.Value
		if payloads[i] == nil {
			payloads[i] = []byte{} // NULL is for keys only
		}
		if len(e.Message.Headers) > 0 {
			hs := make([]header, len(e.Message.Headers))
			for j, h := range e.Message.Headers {
				hs[j] = header(h)
			}
			b, err := json.Marshal(hs)
			if err != nil {
				return nil, fmt.Errorf("postgres: enqueue: headers: %w", err)
			}
			str := string(b)
			headers[i] = &str
		}
	}
	var (
		ids []int64
		err error
	)
	if s.quiet {
		ids, err = tx.insert(ctx, s.sql(enqueueSQL), dests, keys, payloads, headers, s.now())
	} else {
		ids, err = tx.insert(ctx, s.sql(enqueueNotifySQL), dests, keys, payloads, headers, s.now(), s.table.Channel())
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	if len(ids) != len(entries) {
		return nil, fmt.Errorf("postgres: enqueue: %d ids for %d entries", len(ids), len(entries))
	}
	slices.Sort(ids) // identities are drawn in insertion order
	return ids, nil
}

// columns is what scanRecord reads, in its order; claimSQL repeats it qualified.
const columns = `id, destination, msg_key, payload, headers::text, created_at, visible_after, attempts,
	deferrals, first_deferred_at, status, last_error, lease_owner, lease_until, settled_at`

// scanRecord reads the columns, then extra.
func scanRecord(row pgx.CollectableRow, extra ...any) (outbox.Record, error) {
	var (
		r                       outbox.Record
		dest, status            string
		headers, lastErr, owner *string
		firstDeferred, leaseEnd *time.Time
		settled                 *time.Time
	)
	if err := row.Scan(append([]any{&r.ID, &dest, &r.Message.Key, &r.Message.Value, &headers, &r.CreatedAt, &r.VisibleAfter,
		&r.Attempts, &r.Deferrals, &firstDeferred, &status, &lastErr, &owner, &leaseEnd, &settled}, extra...)...); err != nil {
		return r, err
	}
	// The Processor validates the destination, so a bad one makes the row dead rather
	// than the claim fail.
	broker, name, _ := strings.Cut(dest, ":")
	r.Destination = transport.Destination{Broker: broker, Name: name}
	st, err := storekit.ParseStatus(r.ID, status)
	if err != nil {
		return r, err
	}
	r.Status = st
	if headers != nil {
		// Rows written by another program may not hold what Enqueue writes: the row is
		// returned marked, for the Processor to make it dead, rather than fail the claim.
		var hs []header
		if err := json.Unmarshal([]byte(*headers), &hs); err != nil {
			r.Undecodable = "headers: " + err.Error()
		} else {
			r.Message.Headers = make([]transport.Header, len(hs))
			for i, h := range hs {
				r.Message.Headers[i] = transport.Header(h)
			}
		}
	}
	if firstDeferred != nil {
		r.FirstDeferredAt = *firstDeferred
	}
	if lastErr != nil {
		r.LastError = *lastErr
	}
	if owner != nil {
		r.LeaseOwner = *owner
	}
	if leaseEnd != nil {
		r.LeaseUntil = *leaseEnd
	}
	if settled != nil {
		r.SettledAt = *settled
	}
	return r, nil
}

// Get reads row id. A status this version does not know is an
// *storekit.UnknownStatusError naming the row.
func (s *Store) Get(ctx context.Context, id int64) (outbox.Record, error) {
	rows, err := s.db.Query(ctx, s.sql(`SELECT `+columns+` FROM `+Table+` WHERE id = $1`), id)
	if err != nil {
		return outbox.Record{}, fmt.Errorf("postgres: get %d: %w", id, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (outbox.Record, error) { return scanRecord(row) })
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("%w: id %d", ErrNotFound, id)
	}
	if err != nil {
		return r, fmt.Errorf("postgres: get %d: %w", id, err)
	}
	return r, nil
}

// claimable is true for a pending row o that may be claimed at $1: due, not leased,
// and no earlier pending row of its destination and key waiting or leased. A row
// waits for its backoff only after a failure (attempts > 0) and is leased only with
// a lease_owner: the index brokerguard_outbox_waiting_key holds just those. "Not
// leased" is written as the pending index's third column, so that the index scan
// tests it on each entry and passes over the rows other claims lease without reading
// them from the table: with three relays, the two other relays' 1,000 leased rows
// were read by every claim of 500 (2,711 buffers for its candidates; 1,037 now).
const claimable = `o.status = 'pending' AND o.visible_after <= $1 AND ` + notLeased + `
	AND (o.msg_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM ` + Table + ` e
		WHERE e.destination = o.destination AND e.msg_key = o.msg_key AND e.id < o.id
			AND e.status = 'pending' AND (e.attempts > 0 OR e.lease_owner IS NOT NULL)
			AND (e.visible_after > $1 OR e.lease_until > $1)))`

// notLeased is true for a row o whose lease, if any, has ended at $1; written as the
// pending index's third column (schema.sql).
const notLeased = `coalesce(o.lease_until, '-infinity'::timestamptz) <= $1`

// pendingDests lists, as the recursive CTE dests(d), the destinations that have
// pending rows, one index probe each (a skip scan of the pending index); the last
// row's d is NULL.
const pendingDests = `dests(d) AS (
	(SELECT destination FROM ` + Table + ` WHERE status = 'pending' ORDER BY destination LIMIT 1)
	UNION ALL
	SELECT (SELECT destination FROM ` + Table + ` WHERE status = 'pending' AND destination > dests.d
		ORDER BY destination LIMIT 1)
	FROM dests WHERE dests.d IS NOT NULL
)`

// sameDestination is o.destination = d written so that the planner reads the
// destination's pending rows in id order through the (destination, id) index and
// stops at the limit: given a plain equality it may walk the primary key instead,
// through every other destination's rows (a held backlog included), and given a
// range it may read and sort every pending row of the destination.
func sameDestination(d string) string {
	return "o.destination = ANY (ARRAY[" + d + "])"
}

// claimSQL is one claim ($1 now, $2 token, $3 lease end; LIMIT_ the limit and
// PROBE_ the rows per probe, written into the text by claimStatement). First the probes: for each destination whose hold has ended, its first
// claimable rows (up to $5), and that hold extended to the lease end; a hold whose
// destination has no pending row left is dropped. Then, up to the limit, the
// claimable rows of destinations that are not held, lowest ids first: it lists the
// destinations with pending rows by skipping through the index and reads each one's
// rows in id order, so the rows of a held destination are never read.
var claimSQL = `
WITH RECURSIVE ended AS (
	SELECT destination FROM ` + HoldTable + ` WHERE held_until <= $1 FOR UPDATE SKIP LOCKED
), pick AS (
	SELECT c.id, c.ctid, e.destination FROM ended e
	CROSS JOIN LATERAL (
		SELECT o.id, o.ctid FROM ` + Table + ` o WHERE ` + sameDestination("e.destination") + ` AND ` + claimable + `
		ORDER BY o.destination, o.id LIMIT PROBE_ FOR UPDATE SKIP LOCKED
	) c
	ORDER BY c.id LIMIT LIMIT_
), dropped AS (
	DELETE FROM ` + HoldTable + ` h USING ended e
	WHERE h.destination = e.destination
		AND NOT EXISTS (SELECT 1 FROM ` + Table + ` o WHERE o.destination = e.destination AND o.status = 'pending')
), probing AS (
	UPDATE ` + HoldTable + ` h SET held_until = $3, probe_token = $2
	WHERE h.destination IN (SELECT destination FROM pick)
), ` + pendingDests + `, relays AS (
	SELECT greatest(count(*), 1) AS n FROM ` + relayTable + `
), narrow AS (
	SELECT c.ctid, c.id, c.size, c.destination, c.msg_key FROM dests
	CROSS JOIN LATERAL (
		SELECT o.id, o.ctid, SIZE_ AS size, o.destination, o.msg_key FROM ` + Table + ` o WHERE ` + sameDestination("dests.d") + ` AND ` + claimable + `
		ORDER BY o.destination, o.id LIMIT LIMIT_
	) c
	WHERE dests.d IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ` + HoldTable + ` h WHERE h.destination = dests.d)
	ORDER BY c.id LIMIT LIMIT_ - (SELECT count(*) FROM pick)
), scarce AS (
	-- Keys are scarce when a key comes back among the candidates and other relays
	-- are live: then the claim leaves them their share of the keys (shareKeys).
	SELECT (SELECT n FROM relays) > 1 AND count(DISTINCT (destination, msg_key)) FILTER (WHERE msg_key IS NOT NULL) < count(msg_key) AS yes FROM narrow
), wide AS (
	-- Read only when keys are scarce (a one-time filter): the relays' count times
	-- the candidates, so that the keys kept fill the batch.
	SELECT c.ctid, c.id, c.size, c.destination, c.msg_key FROM dests
	CROSS JOIN LATERAL (
		SELECT o.id, o.ctid, SIZE_ AS size, o.destination, o.msg_key FROM ` + Table + ` o WHERE ` + sameDestination("dests.d") + ` AND ` + claimable + `
		ORDER BY o.destination, o.id LIMIT LIMIT_ * (SELECT n FROM relays)
	) c
	WHERE (SELECT yes FROM scarce) AND dests.d IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM ` + HoldTable + ` h WHERE h.destination = dests.d)
	ORDER BY c.id LIMIT LIMIT_ * (SELECT n FROM relays)
), ranked AS (
	-- Keys by their first row; unkeyed rows are ranked apart and always kept.
	SELECT f.*, max(f.kr) FILTER (WHERE f.msg_key IS NOT NULL) OVER () AS keys FROM (
		SELECT w.*, dense_rank() OVER (PARTITION BY w.msg_key IS NULL ORDER BY w.first, w.destination, w.msg_key) AS kr FROM (
			SELECT wide.*, min(wide.id) OVER (PARTITION BY wide.destination, wide.msg_key) AS first FROM wide
		) w
	) f
), candidates AS (
	SELECT ctid, id, size FROM narrow WHERE NOT (SELECT yes FROM scarce)
	UNION ALL
	(SELECT ctid, id, size FROM ranked
	WHERE msg_key IS NULL OR kr <= ceil(keys::numeric / (SELECT n FROM relays))
	ORDER BY id LIMIT LIMIT_ - (SELECT count(*) FROM pick))
), due AS (
	DUE_
), locked AS (
	-- Lock only the rows taken, not every destination's candidates; a row another
	-- claim took meanwhile is skipped, or fails the lease test once its lock is had
	-- (the test is made again on the row's latest version).
	-- The rows are found by their place in the table (ctid), here and in the
	-- UPDATE: whatever the statistics, a TID scan goes straight to them, where
	-- a search by id would walk the primary key twice for every row, and
	-- "status = 'pending'" could have the planner walk the whole partial index of
	-- pending rows, which looks tiny on a table without statistics (10,220
	-- buffers and 450 ms for 100 rows of 20,000 keyed ones).
	SELECT o.ctid FROM ` + Table + ` o
	WHERE o.ctid = ANY (ARRAY(SELECT ctid FROM due)) AND o.status NOT IN ('published', 'dead')
		AND (o.lease_until IS NULL OR o.lease_until <= $1)
	FOR UPDATE SKIP LOCKED
)
UPDATE ` + Table + ` o SET lease_owner = $2, lease_until = $3
WHERE o.ctid = ANY (ARRAY(SELECT ctid FROM pick UNION ALL SELECT ctid FROM locked)) -- the locked versions, by TID
RETURNING o.id, o.destination, o.msg_key, o.payload, o.headers::text, o.created_at, o.visible_after,
	o.attempts, o.deferrals, o.first_deferred_at, o.status, o.last_error, o.lease_owner, o.lease_until, o.settled_at,
	o.id = ANY (ARRAY(SELECT id FROM pick))`

// claimStatement writes the limits into claimSQL as numbers: given as parameters,
// PostgreSQL's generic plan (the one a cached prepared statement gets after five
// runs) does not know them and costs the lateral scans as if they read a good part of
// the table.
//
// With a bound in bytes, due keeps the candidates, by id, while their running total
// of sizes (rowSize) stays within it, and the first one in any case; without one,
// the size is not read and due is every candidate.
func claimStatement(limit, probe, maxBytes int) string {
	size, due := "0", "SELECT ctid FROM candidates"
	if maxBytes > 0 {
		size = rowSize
		due = `SELECT ctid FROM (
		SELECT ctid, sum(size) OVER (ORDER BY id) AS upto, row_number() OVER (ORDER BY id) AS n FROM candidates
	) w WHERE w.upto <= ` + strconv.Itoa(maxBytes) + ` OR w.n = 1`
	}
	return strings.NewReplacer("LIMIT_", strconv.Itoa(limit), "PROBE_", strconv.Itoa(probe), "SIZE_", size, "DUE_", due).Replace(claimSQL)
}

// rowSize is a row's size as a claim's bound in bytes counts it: its value's and
// key's lengths (read from the values' headers, without reading the values) and its
// headers' stored size.
const rowSize = `(octet_length(o.payload) + coalesce(octet_length(o.msg_key), 0) + coalesce(pg_column_size(o.headers), 0))`

// Claim implements outbox.Store in one statement. It is safe against concurrent
// claims; per-key order across claims that run at the same instant is not
// guaranteed (see package outbox).
func (s *Store) Claim(ctx context.Context, r outbox.ClaimRequest) ([]outbox.Record, error) {
	var recs []outbox.Record
	err := s.planned(ctx, s.claimSetup(), func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		recs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Record, error) {
			var probe bool
			rec, err := scanRecord(row, &probe)
			rec.Probe = probe
			return rec, err
		})
		return err
	}, s.sql(claimStatement(r.Limit, max(r.ProbeLimit, 1), r.MaxBytes)), r.Now, r.Token, r.Now.Add(r.Lease))
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	slices.SortFunc(recs, func(a, b outbox.Record) int { return cmp.Compare(a.ID, b.ID) })
	return recs, nil
}

// planned sends stmt in one round trip and one transaction after setup, which sets
// the planner up for that transaction, and hands its results to f. Each setting of
// claimSetup removed a slowdown of the claim on an analysed table, measured against the
// same table without statistics (BenchmarkRelaysFreshVsAnalysed, one relay, 20,000
// rows): 200 against 2,455 rows a second at first, then 973 against 12,453.
//   - JIT off: a plan costed as high as the claim's can be is JIT-compiled, which
//     takes hundreds of milliseconds for a statement that runs in one.
//   - Custom plans only: a cached prepared statement switches to PostgreSQL's generic
//     plan after five runs, and the claim's generic plan took 2 to 7 s where the
//     custom plan took 16 ms.
//   - No bitmap scans: with statistics, the per-key check of every candidate row was
//     a bitmap scan, which visits again, on every claim, the index entries of all the
//     rows published since the last vacuum; a plain index scan marks them dead the
//     first time (68 ms against 8 ms per claim after 6,000 rows).
//
// The backlog needs the first two, and no sequential scan instead: its count reads
// pending rows by bitmap, destination by destination, and once the pending index
// held the lease's end too (a fifth larger), an analysed table whose rows are
// all pending had the planner read the whole table once per destination instead.
func (s *Store) planned(ctx context.Context, setup []string, f func(br pgx.BatchResults) error, stmt string, args ...any) (err error) {
	b := &pgx.Batch{}
	for _, q := range setup {
		b.Queue(q)
	}
	b.Queue(stmt, args...)
	br := s.db.SendBatch(ctx, b)
	defer func() { err = firstErr(err, br.Close()) }()
	for range setup {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return f(br)
}

// firstErr returns err, or the error of closing when there was none. Closing after
// a failed statement answers that statement's error again (pgx's batch results do):
// joined to it, one cause would read as two, on two lines of a log.
func firstErr(err, closeErr error) error {
	if err != nil {
		return err
	}
	return closeErr
}

// The setups of planned.
const (
	planSetup    = `SELECT set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true)`
	backlogSetup = planSetup + `, set_config('enable_seqscan', 'off', true)`
	claimSetup   = planSetup + `, set_config('enable_bitmapscan', 'off', true)`
)

// claimLockClass is the first key of the advisory lock that takes a table's claims
// one at a time (the second is the table's OID); Migrate's lock is a one-key lock,
// which PostgreSQL keeps apart from two-key ones.
const claimLockClass = 7362890

// claimSetup is the claim's planner setup, the bounds of its waits on the server
// (the Store's timeout: a claim whose client gave up must not go on waiting for the
// lock and lease rows nobody will publish), the claims' lock, and the freeing of the
// rows of relays whose session is gone (freeGoneSQL, session.go).
//
// The lock takes concurrent claims of one table one at a time, each in its own
// transaction with the claim; the claim statement runs after the lock is had, so its
// snapshot sees the leases of the claim before it. Without it, claims made at the
// same instant pick the same lowest candidate rows, the first locks them and the
// others skip them and come back empty, which Run takes for "nothing due" and waits
// out its poll interval: with three relays one got no row at all. It also keeps
// per-key order across relays: a later row of a key is never claimed while an earlier
// one is leased by a claim the snapshot could not see. A claim takes milliseconds and
// publishing does not hold the lock, so relays still publish in parallel.
//
// The claim commits without waiting for its WAL to reach the disk
// (synchronous_commit off), so the next relay's claim does not wait for that flush
// either. A claim lost in a server crash only gives its rows back early: they are
// published again, as they would be when their lease ended (the relay's write-backs
// fail with the server), and the write-backs, which do wait, flush the claim's WAL
// with their own.
func (s *Store) claimSetup() []string {
	setup := claimSetup + `, set_config('synchronous_commit', 'off', true)`
	if ms := s.timeout.Milliseconds(); ms > 0 {
		t := strconv.FormatInt(ms, 10)
		setup += `, set_config('lock_timeout', '` + t + `', true), set_config('statement_timeout', '` + t + `', true)`
	}
	return []string{setup, s.claimLock, s.sql(freeGoneSQL)}
}

// heldBy limits a write to the rows the claim with token $2 still leases. Every write
// that settles or releases a row clears its lease_owner, so a leased row is pending.
// The condition leaves status out on purpose: "status = 'pending'" lets the planner
// pick a partial index of pending rows, which on a table without statistics looks
// tiny and is walked whole, where the primary key finds the rows at once whatever
// the statistics say.
const heldBy = ` AND lease_owner = $2`

const markSQL = `UPDATE ` + Table + ` SET status = 'published', settled_at = $3,
	lease_owner = NULL, lease_until = NULL WHERE id = ANY($1)` + heldBy

// MarkPublished implements outbox.Store.
func (s *Store) MarkPublished(ctx context.Context, token string, now time.Time, ids []int64) (int, error) {
	tag, err := s.db.Exec(ctx, s.sql(markSQL), ids, token, now)
	if err != nil {
		return 0, fmt.Errorf("postgres: mark published: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

const deferSQL = `UPDATE ` + Table + ` SET deferrals = deferrals + 1,
	first_deferred_at = coalesce(first_deferred_at, $3), lease_owner = NULL, lease_until = NULL
	WHERE id = ANY($1)` + heldBy

// Defer implements outbox.Store with one UPDATE statement for all the rows.
func (s *Store) Defer(ctx context.Context, d outbox.Deferral) (int, error) {
	tag, err := s.db.Exec(ctx, s.sql(deferSQL), d.IDs, d.Token, d.Now)
	if err != nil {
		return 0, fmt.Errorf("postgres: defer: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// holdSQL upserts the hold of $1 ($2 until, $3 now, $4 token, $7 why it is unusable)
// and makes dead the destination's rows whose held wait passed $5 microseconds ($6
// the reason).
const holdSQL = `
WITH h AS (
	INSERT INTO ` + HoldTable + ` AS h (destination, held_until, held_since, reason) VALUES ($1, $2, $3, $7)
	ON CONFLICT (destination) DO UPDATE SET
		held_until = CASE WHEN h.probe_token = $4 THEN EXCLUDED.held_until
			ELSE greatest(h.held_until, EXCLUDED.held_until) END,
		probe_token = CASE WHEN h.probe_token = $4 THEN NULL ELSE h.probe_token END,
		reason = EXCLUDED.reason
	RETURNING h.held_since
)
UPDATE ` + Table + ` o SET status = 'dead', last_error = $6, settled_at = $3, lease_owner = NULL, lease_until = NULL
FROM h
WHERE $3::timestamptz - h.held_since > $5::bigint * interval '1 microsecond'
	AND o.destination = $1 AND o.status = 'pending'
	AND $3::timestamptz - greatest(o.created_at, h.held_since) > $5::bigint * interval '1 microsecond'
	AND (o.lease_until IS NULL OR o.lease_until <= $3 OR o.lease_owner = $4)`

// Hold implements outbox.Store in one statement.
func (s *Store) Hold(ctx context.Context, h outbox.Hold) (int, error) {
	tag, err := s.db.Exec(ctx, s.sql(holdSQL), h.Destination.String(), h.Until, h.Now, h.Token,
		h.MaxDeferral.Microseconds(), outbox.ReasonDeferralExhausted, h.Reason)
	if err != nil {
		return 0, fmt.Errorf("postgres: hold %s: %w", h.Destination, err)
	}
	return int(tag.RowsAffected()), nil
}

// Unhold implements outbox.Store.
func (s *Store) Unhold(ctx context.Context, d transport.Destination, token string) error {
	_, err := s.db.Exec(ctx, s.sql(`DELETE FROM `+HoldTable+` WHERE destination = $1 AND probe_token = $2`), d.String(), token)
	if err != nil {
		return fmt.Errorf("postgres: unhold %s: %w", d, err)
	}
	return nil
}

const failSQL = `UPDATE ` + Table + ` o SET
	attempts = o.attempts + 1,
	visible_after = f.retry_at,
	status = CASE WHEN f.dead THEN 'dead' ELSE 'pending' END,
	last_error = f.err,
	settled_at = CASE WHEN f.dead THEN $6::timestamptz END,
	lease_owner = NULL, lease_until = NULL
FROM unnest($1::bigint[], $3::timestamptz[], $4::bool[], $5::text[]) AS f(id, retry_at, dead, err)
WHERE o.id = f.id AND o.lease_owner = $2
RETURNING f.dead`

// Fail implements outbox.Store with one UPDATE statement for all the failures.
func (s *Store) Fail(ctx context.Context, token string, failures []outbox.Failure) (failed, dead int, err error) {
	ids := make([]int64, len(failures))
	retry := make([]time.Time, len(failures))
	deads := make([]bool, len(failures))
	msgs := make([]string, len(failures))
	for i, f := range failures {
		ids[i], retry[i], deads[i], msgs[i] = f.ID, f.RetryAt, f.Dead, f.Err
	}
	rows, err := s.db.Query(ctx, s.sql(failSQL), ids, token, retry, deads, msgs, s.now())
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: fail: %w", err)
	}
	died, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: fail: %w", err)
	}
	for _, d := range died {
		if d {
			dead++
		} else {
			failed++
		}
	}
	return failed, dead, nil
}

// Release implements outbox.Store.
func (s *Store) Release(ctx context.Context, token string) error {
	// Along the leased index: the rows of one claim, whatever else is pending.
	_, err := s.db.Exec(ctx, s.sql(`UPDATE `+Table+` SET lease_owner = NULL, lease_until = NULL
		WHERE (lease_owner COLLATE "C") = $1 AND status = 'pending'`), token)
	if err != nil {
		return fmt.Errorf("postgres: release: %w", err)
	}
	return nil
}

// backlogSQL counts pending rows destination by destination, skipping through the
// pending index to list the destinations as claimSQL does, so that it reads the
// pending rows' index entries and never the settled rows, whatever share of the table
// is pending: a plain count over the table is a sequential scan once statistics say
// half of it is pending.
const backlogSQL = `
WITH RECURSIVE ` + pendingDests + `
SELECT coalesce(sum(c.n), 0)::bigint, min(c.oldest) FROM dests
CROSS JOIN LATERAL (
	SELECT count(*) AS n, min(created_at) AS oldest FROM ` + Table + `
	WHERE status = 'pending' AND destination = dests.d
) c
WHERE dests.d IS NOT NULL`

// Backlog implements outbox.Store; the age is measured on the Store's clock.
func (s *Store) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	var first *time.Time
	err = s.planned(ctx, []string{backlogSetup}, func(br pgx.BatchResults) error { return br.QueryRow().Scan(&pending, &first) }, s.sql(backlogSQL))
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: backlog: %w", err)
	}
	if first != nil {
		oldest = max(s.now().Sub(*first), 0)
	}
	return pending, oldest, nil
}
