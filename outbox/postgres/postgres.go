// Package postgres is an outbox.Store on PostgreSQL, through pgx v5.
//
// Rows live in the table brokerguard_outbox, created by Migrate from the embedded
// Schema (or by the caller's own migration tool from the same SQL). Applications
// enqueue inside their own transaction, pgx or database/sql:
//
//	tx, _ := pool.Begin(ctx)
//	// ... the business change ...
//	store.Enqueue(ctx, postgres.Pgx(tx), outbox.Entry{Destination: d, Message: m})
//	tx.Commit(ctx) // the row exists exactly when the change does
//
// Dispatchers claim due rows with SELECT ... FOR UPDATE SKIP LOCKED and a lease
// (lease_owner, lease_until), so any number of them can share the table; a crashed
// dispatcher's rows are claimable again when their lease ends. Every time decision
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
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// Schema is the SQL that creates the outbox table and its index. It can be run more
// than once.
//
//go:embed schema.sql
var Schema string

// Table is the name of the outbox table.
const Table = "brokerguard_outbox"

// Execer runs a statement; *pgxpool.Pool, *pgx.Conn and pgx.Tx are Execers.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate creates the outbox table and its indexes if they do not exist, in one
// transaction under an advisory lock. Of the options only WithTable matters here.
func Migrate(ctx context.Context, db Execer, opts ...Option) error {
	var s Store
	for _, o := range opts {
		o(&s)
	}
	if _, err := db.Exec(ctx, SchemaFor(s.table)); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

// DB is the connection pool the Store works on; *pgxpool.Pool is one. Each method
// call runs its statement on its own (no transaction is held between calls).
type DB interface {
	Execer
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNotFound is returned by Get for an id with no row.
var ErrNotFound = errors.New("postgres: outbox row not found")

// Option configures a Store.
type Option func(*Store)

// WithClock makes Enqueue, Backlog and Fail (the time a row becomes dead) read time
// from c (default time.Now). Give it the Processor's clock.
func WithClock(c breaker.Clock) Option { return func(s *Store) { s.clock = c } }

// WithoutNotify stops Enqueue from sending the NOTIFY that wakes Listeners: the
// polling-only mode. PostgreSQL serializes the commits of transactions that sent a
// NOTIFY, which a database taking thousands of enqueueing commits a second may feel.
func WithoutNotify() Option { return func(s *Store) { s.quiet = true } }

// Store is an outbox.Store on a PostgreSQL table. It is safe for concurrent use.
type Store struct {
	db    DB
	clock breaker.Clock
	table TableName
	quiet bool // no NOTIFY on Enqueue
	stmts *statements
}

var (
	_ outbox.Store       = (*Store)(nil)
	_ outbox.Purger      = (*Store)(nil)
	_ outbox.DeadLetters = (*Store)(nil)
)

// New returns a Store on db. The table must exist (see Migrate).
func New(db DB, opts ...Option) *Store {
	s := &Store{db: db}
	for _, o := range opts {
		o(s)
	}
	s.stmts = &statements{t: s.table}
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
	defer func() { err = errors.Join(err, rows.Close()) }()
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
// Listeners are woken. Every destination must be valid; otherwise nothing is
// inserted.
func (s *Store) Enqueue(ctx context.Context, tx Tx, entries ...outbox.Entry) ([]int64, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	dests := make([]string, len(entries))
	keys := make([][]byte, len(entries))
	payloads := make([][]byte, len(entries))
	headers := make([]*string, len(entries))
	for i, e := range entries {
		if err := e.Destination.Validate(); err != nil {
			return nil, fmt.Errorf("postgres: enqueue: %w", err)
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
		ids, err = tx.insert(ctx, s.sql(enqueueNotifySQL), dests, keys, payloads, headers, s.now(), s.table.channel())
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

func scanRecord(row pgx.CollectableRow) (outbox.Record, error) {
	var (
		r                       outbox.Record
		dest, status            string
		headers, lastErr, owner *string
		firstDeferred, leaseEnd *time.Time
		settled                 *time.Time
	)
	if err := row.Scan(&r.ID, &dest, &r.Message.Key, &r.Message.Value, &headers, &r.CreatedAt, &r.VisibleAfter,
		&r.Attempts, &r.Deferrals, &firstDeferred, &status, &lastErr, &owner, &leaseEnd, &settled); err != nil {
		return r, err
	}
	// The Processor validates the destination, so a bad one makes the row dead rather
	// than the claim fail.
	broker, name, _ := strings.Cut(dest, ":")
	r.Destination = transport.Destination{Broker: broker, Name: name}
	st, err := outbox.ParseStatus(r.ID, status)
	if err != nil {
		return r, err
	}
	r.Status = st
	if headers != nil {
		var hs []header
		if err := json.Unmarshal([]byte(*headers), &hs); err != nil {
			return r, fmt.Errorf("postgres: row %d: headers: %w", r.ID, err)
		}
		r.Message.Headers = make([]transport.Header, len(hs))
		for i, h := range hs {
			r.Message.Headers[i] = transport.Header(h)
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
// *outbox.UnknownStatusError naming the row.
func (s *Store) Get(ctx context.Context, id int64) (outbox.Record, error) {
	rows, err := s.db.Query(ctx, s.sql(`SELECT `+columns+` FROM `+Table+` WHERE id = $1`), id)
	if err != nil {
		return outbox.Record{}, fmt.Errorf("postgres: get %d: %w", id, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRecord)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("%w: id %d", ErrNotFound, id)
	}
	if err != nil {
		return r, fmt.Errorf("postgres: get %d: %w", id, err)
	}
	return r, nil
}

const claimSQL = `
WITH due AS (
	SELECT id FROM ` + Table + `
	WHERE status = 'pending' AND visible_after <= $1 AND (lease_until IS NULL OR lease_until <= $1)
	ORDER BY visible_after, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE ` + Table + ` o SET lease_owner = $3, lease_until = $4
FROM due WHERE o.id = due.id
RETURNING o.id, o.destination, o.msg_key, o.payload, o.headers::text, o.created_at, o.visible_after,
	o.attempts, o.deferrals, o.first_deferred_at, o.status, o.last_error, o.lease_owner, o.lease_until, o.settled_at`

// Claim implements outbox.Store: one statement that locks due rows, skipping those
// another claim has locked, and leases them.
func (s *Store) Claim(ctx context.Context, owner string, now time.Time, limit int, lease time.Duration) ([]outbox.Record, error) {
	rows, err := s.db.Query(ctx, s.sql(claimSQL), now, limit, owner, now.Add(lease))
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	slices.SortFunc(recs, func(a, b outbox.Record) int { return cmp.Compare(a.ID, b.ID) })
	return recs, nil
}

// heldBy limits a write to the rows owner still leases. Every write that settles or
// releases a row clears its lease_owner, so a leased row is pending; the condition
// leaves status out on purpose: "status = 'pending'" would let the planner pick the
// partial index of pending rows, which on a table without statistics looks tiny and
// is walked whole, where the primary key finds the rows at once whatever the
// statistics say.
const heldBy = ` AND lease_owner = $2`

// MarkPublished implements outbox.Store.
func (s *Store) MarkPublished(ctx context.Context, owner string, now time.Time, ids []int64) error {
	_, err := s.db.Exec(ctx, s.sql(markSQL), ids, owner, now)
	if err != nil {
		return fmt.Errorf("postgres: mark published: %w", err)
	}
	return nil
}

const markSQL = `UPDATE ` + Table + ` SET status = 'published', settled_at = $3,
	lease_owner = NULL, lease_until = NULL WHERE id = ANY($1)` + heldBy

// exhausted is true for a row whose deferral lifetime has passed ($3 now, $6 the
// MaxDeferral in microseconds).
const exhausted = `($3::timestamptz - coalesce(first_deferred_at, $3::timestamptz) > $6::bigint * interval '1 microsecond')`

const deferSQL = `UPDATE ` + Table + ` SET
	status = CASE WHEN ` + exhausted + ` THEN 'dead' ELSE 'pending' END,
	last_error = CASE WHEN ` + exhausted + ` THEN $7 ELSE last_error END,
	visible_after = CASE WHEN ` + exhausted + ` THEN visible_after
		ELSE greatest(visible_after, $4::timestamptz) + $5::bigint * interval '1 microsecond' END,
	deferrals = CASE WHEN ` + exhausted + ` THEN deferrals ELSE deferrals + 1 END,
	first_deferred_at = coalesce(first_deferred_at, $3::timestamptz),
	settled_at = CASE WHEN ` + exhausted + ` THEN $3::timestamptz END,
	lease_owner = NULL, lease_until = NULL
WHERE id = ANY($1)` + heldBy + `
RETURNING status = 'dead'`

// Defer implements outbox.Store with one UPDATE statement for all the rows.
func (s *Store) Defer(ctx context.Context, d outbox.Deferral) (deferred, dead int, err error) {
	rows, err := s.db.Query(ctx, s.sql(deferSQL), d.IDs, d.Owner, d.Now, d.NotBefore,
		d.Jitter.Microseconds(), d.MaxDeferral.Microseconds(), outbox.ReasonDeferralExhausted)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: defer: %w", err)
	}
	died, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: defer: %w", err)
	}
	for _, isDead := range died {
		if isDead {
			dead++
		} else {
			deferred++
		}
	}
	return deferred, dead, nil
}

const failSQL = `UPDATE ` + Table + ` o SET
	attempts = o.attempts + 1,
	visible_after = f.retry_at,
	status = CASE WHEN f.dead THEN 'dead' ELSE 'pending' END,
	last_error = f.err,
	settled_at = CASE WHEN f.dead THEN $6::timestamptz END,
	lease_owner = NULL, lease_until = NULL
FROM unnest($1::bigint[], $3::timestamptz[], $4::bool[], $5::text[]) AS f(id, retry_at, dead, err)
WHERE o.id = f.id AND o.lease_owner = $2`

// Fail implements outbox.Store with one UPDATE statement for all the failures.
func (s *Store) Fail(ctx context.Context, owner string, failures []outbox.Failure) error {
	ids := make([]int64, len(failures))
	retry := make([]time.Time, len(failures))
	dead := make([]bool, len(failures))
	msgs := make([]string, len(failures))
	for i, f := range failures {
		ids[i], retry[i], dead[i], msgs[i] = f.ID, f.RetryAt, f.Dead, f.Err
	}
	if _, err := s.db.Exec(ctx, s.sql(failSQL), ids, owner, retry, dead, msgs, s.now()); err != nil {
		return fmt.Errorf("postgres: fail: %w", err)
	}
	return nil
}

// Release implements outbox.Store.
func (s *Store) Release(ctx context.Context, owner string) error {
	_, err := s.db.Exec(ctx, s.sql(`UPDATE `+Table+` SET lease_owner = NULL, lease_until = NULL
		WHERE lease_owner = $1 AND status = 'pending'`), owner)
	if err != nil {
		return fmt.Errorf("postgres: release: %w", err)
	}
	return nil
}

const backlogSQL = `SELECT count(*), min(created_at) FROM ` + Table + ` WHERE status = 'pending'`

// Backlog implements outbox.Store; the age is measured on the Store's clock.
func (s *Store) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	var first *time.Time
	err = s.db.QueryRow(ctx, s.sql(backlogSQL)).Scan(&pending, &first)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: backlog: %w", err)
	}
	if first != nil {
		oldest = max(s.now().Sub(*first), 0)
	}
	return pending, oldest, nil
}
