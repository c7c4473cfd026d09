package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultTimeout bounds each call of a Store (but Enqueue) and each step of its
// Listener unless WithTimeout says otherwise (a Listener's steps keep it even when
// the Store's calls have no bound): a third of outbox.DefaultLease, as the
// Processor's own store timeout.
const DefaultTimeout = 10 * time.Second

// WithTimeout bounds every call of the Store but Enqueue (which runs in the caller's
// transaction, on the caller's context) to d, unless the caller's context ends
// sooner, and each step of its Listeners (LISTEN, the receive check; connecting is
// bounded by the connection string's connect_timeout).
// A database that stopped answering is then an error within d. A call that ran out
// of time also closes the idle connections of the Store's pool, when it is a
// *pgxpool.Pool: the path that went silent (a lost host, a failover that moved the
// address) leaves every connection on it hung, and the next call should dial afresh
// rather than wait on each of them in turn. Zero or less: no bound of the Store's own
// (the callers' contexts only). Default DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) { s.timeout = d; s.timeoutSet = true }
}

// boundedDB is the Store's DB with its timeout: each statement's context is bounded
// until its results are read, and a statement that ran out of time resets the pool.
type boundedDB struct {
	db      DB
	timeout time.Duration
	reset   func() // nil: the DB cannot drop its connections
}

func newBoundedDB(db DB, timeout time.Duration) boundedDB {
	b := boundedDB{db: db, timeout: timeout}
	if r, ok := db.(interface{ Reset() }); ok {
		b.reset = r.Reset
	}
	return b
}

// bound returns ctx with the timeout, unless it ends sooner already.
func (b boundedDB) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.timeout <= 0 {
		return ctx, func() {}
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= b.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.timeout)
}

// done ends a statement run on ctx: it resets the pool if the statement ran out of
// time (err is the statement's first error, if any), and returns err.
func (b boundedDB) done(ctx context.Context, cancel context.CancelFunc, err error) error {
	if err != nil && b.reset != nil && timedOut(ctx, err) {
		b.reset()
	}
	cancel()
	return err
}

// timedOut reports whether err is the end of a statement whose deadline passed (not
// one cancelled by its caller).
func timedOut(ctx context.Context, err error) bool {
	return err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded)
}

func (b boundedDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, cancel := b.bound(ctx)
	tag, err := b.db.Exec(ctx, sql, args...)
	return tag, b.done(ctx, cancel, err)
}

func (b boundedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	ctx, cancel := b.bound(ctx)
	rows, err := b.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, b.done(ctx, cancel, err)
	}
	return &boundedRows{Rows: rows, b: b, ctx: ctx, cancel: cancel}, nil
}

func (b boundedDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	ctx, cancel := b.bound(ctx)
	return boundedRow{row: b.db.QueryRow(ctx, sql, args...), b: b, ctx: ctx, cancel: cancel}
}

func (b boundedDB) SendBatch(ctx context.Context, batch *pgx.Batch) pgx.BatchResults {
	ctx, cancel := b.bound(ctx)
	return &boundedBatch{BatchResults: b.db.SendBatch(ctx, batch), b: b, ctx: ctx, cancel: cancel}
}

// boundedRows keeps the statement's context until the rows are closed.
type boundedRows struct {
	pgx.Rows
	b      boundedDB
	ctx    context.Context
	cancel context.CancelFunc
	closed bool
}

func (r *boundedRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		_ = r.b.done(r.ctx, r.cancel, r.Rows.Err())
	}
}

type boundedRow struct {
	row    pgx.Row
	b      boundedDB
	ctx    context.Context
	cancel context.CancelFunc
}

func (r boundedRow) Scan(dest ...any) error {
	return r.b.done(r.ctx, r.cancel, r.row.Scan(dest...))
}

// boundedBatch keeps the batch's context until its results are closed; an error of
// any of them that ran out of time resets the pool.
type boundedBatch struct {
	pgx.BatchResults
	b      boundedDB
	ctx    context.Context
	cancel context.CancelFunc
	err    error // the first error a result gave
}

func (r *boundedBatch) note(err error) error {
	if err != nil && r.err == nil {
		r.err = err
	}
	return err
}

func (r *boundedBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := r.BatchResults.Exec()
	return tag, r.note(err)
}

func (r *boundedBatch) Close() error {
	err := r.BatchResults.Close()
	_ = r.b.done(r.ctx, r.cancel, r.note(err))
	return err
}
