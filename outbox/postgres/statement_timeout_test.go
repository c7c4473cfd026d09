package postgres_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// pgSilentDB is a database that never answers: each statement waits for its context
// to end and fails with its error. It records the statements' deadlines and counts
// Reset, as *pgxpool.Pool has it.
type pgSilentDB struct {
	deadlines []time.Time // zero: the statement had none
	resets    int
}

var errPgNoDeadline = errors.New("statement without a deadline")

func (db *pgSilentDB) wait(ctx context.Context) error {
	dl, _ := ctx.Deadline()
	db.deadlines = append(db.deadlines, dl)
	if dl.IsZero() {
		return errPgNoDeadline // it would hang for good
	}
	<-ctx.Done()
	return ctx.Err()
}

func (db *pgSilentDB) Exec(ctx context.Context, _ string, _ ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, db.wait(ctx)
}

func (db *pgSilentDB) Query(ctx context.Context, _ string, _ ...any) (pgx.Rows, error) {
	return nil, db.wait(ctx)
}

func (db *pgSilentDB) QueryRow(ctx context.Context, _ string, _ ...any) pgx.Row {
	return pgErrRow{db.wait(ctx)}
}

func (db *pgSilentDB) SendBatch(ctx context.Context, _ *pgx.Batch) pgx.BatchResults {
	return &pgSilentBatch{db: db, ctx: ctx}
}

// pgSilentBatch is a batch of pgSilentDB: its first result waits for the batch's
// context to end; Close returns the first result's error, as pgx's does.
type pgSilentBatch struct {
	pgx.BatchResults // the methods not used: nil
	db               *pgSilentDB
	ctx              context.Context
	started          bool
	err              error
}

func (b *pgSilentBatch) Exec() (pgconn.CommandTag, error) {
	if !b.started {
		b.started = true
		b.err = b.db.wait(b.ctx)
	}
	return pgconn.CommandTag{}, b.err
}

func (b *pgSilentBatch) Query() (pgx.Rows, error) { _, err := b.Exec(); return nil, err }
func (b *pgSilentBatch) QueryRow() pgx.Row        { _, err := b.Exec(); return pgErrRow{err} }
func (b *pgSilentBatch) Close() error             { return b.err }

func (db *pgSilentDB) Reset() { db.resets++ }

type pgErrRow struct{ err error }

func (r pgErrRow) Scan(...any) error { return r.err }

// Each call of a Store is bounded by DefaultTimeout unless WithTimeout says
// otherwise, or by the caller's deadline when that is sooner; WithTimeout(0) leaves
// only the caller's. A statement that ran out of time resets the pool; one its caller
// cancelled does not.
func TestStoreCallsAreBoundedByTheTimeout(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []postgres.Option
		caller    time.Duration // the caller's deadline; 0: none
		cancel    bool          // the caller cancels instead
		want      time.Duration // the statement's deadline; 0: none
		wantErr   error
		wantReset int
		batch     bool // a batched call (Backlog) instead of Get
	}{
		{name: "default", want: postgres.DefaultTimeout, wantErr: context.DeadlineExceeded, wantReset: 1},
		{name: "own timeout", opts: []postgres.Option{postgres.WithTimeout(time.Second)}, caller: time.Hour, want: time.Second, wantErr: context.DeadlineExceeded, wantReset: 1},
		{name: "sooner caller", caller: time.Second, want: time.Second, wantErr: context.DeadlineExceeded, wantReset: 1},
		{name: "caller at the timeout", caller: postgres.DefaultTimeout, want: postgres.DefaultTimeout, wantErr: context.DeadlineExceeded, wantReset: 1},
		{name: "no timeout", opts: []postgres.Option{postgres.WithTimeout(0)}, wantErr: errPgNoDeadline},
		{name: "no timeout, caller's deadline", opts: []postgres.Option{postgres.WithTimeout(0)}, caller: time.Minute, want: time.Minute, wantErr: context.DeadlineExceeded, wantReset: 1},
		{name: "cancelled", cancel: true, want: postgres.DefaultTimeout, wantErr: context.Canceled},
		{name: "batch", want: postgres.DefaultTimeout, wantErr: context.DeadlineExceeded, wantReset: 1, batch: true},
		{name: "batch cancelled", cancel: true, want: postgres.DefaultTimeout, wantErr: context.Canceled, batch: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := &pgSilentDB{}
				s := postgres.New(db, tc.opts...)
				ctx := t.Context()
				if tc.caller > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.caller)
					defer cancel()
				}
				if tc.cancel {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					go func() {
						synctest.Wait()
						cancel()
					}()
				}
				start := time.Now()
				var err error
				if tc.batch {
					_, _, err = s.Backlog(ctx)
				} else {
					_, err = s.Get(ctx, 1)
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("a call on a silent database: %v, want %v", err, tc.wantErr)
				}
				if len(db.deadlines) != 1 {
					t.Fatalf("%d statements, want 1", len(db.deadlines))
				}
				var got time.Duration
				if dl := db.deadlines[0]; !dl.IsZero() {
					got = dl.Sub(start)
				}
				if got != tc.want {
					t.Fatalf("the statement's deadline is %v from the call, want %v", got, tc.want)
				}
				if db.resets != tc.wantReset {
					t.Fatalf("%d resets, want %d", db.resets, tc.wantReset)
				}
			})
		})
	}
}
