package postgres_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// pgBrokenDB is a database whose connection breaks under every statement: each one
// fails at once with err, and a batch's Close answers the first result's error
// again, as pgx's does.
type pgBrokenDB struct{ cause error }

func (db pgBrokenDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, db.cause
}
func (db pgBrokenDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, db.cause }
func (db pgBrokenDB) QueryRow(context.Context, string, ...any) pgx.Row        { return pgErrRow{db.cause} }
func (db pgBrokenDB) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	return pgBrokenBatch{err: db.cause}
}

type pgBrokenBatch struct {
	pgx.BatchResults // the methods not used: nil
	err              error
}

func (b pgBrokenBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b pgBrokenBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b pgBrokenBatch) QueryRow() pgx.Row                { return pgErrRow{b.err} }
func (b pgBrokenBatch) Close() error                     { return b.err }

// A store error names its cause once, on one line, whichever statement failed:
// "postgres: claim: unexpected EOF", not that followed by the cause again on a second
// line (which the default log and the error handler would print as two failures).
func TestStoreErrorsNameTheirCauseOnce(t *testing.T) {
	s := postgres.New(pgBrokenDB{cause: io.ErrUnexpectedEOF})
	ctx := context.Background()
	now := time.Now()
	calls := map[string]func() error{
		"claim": func() error {
			_, err := s.Claim(ctx, outbox.ClaimRequest{Token: "t", Now: now, Limit: 10, Lease: time.Minute})
			return err
		},
		"backlog":        func() error { _, _, err := s.Backlog(ctx); return err },
		"mark published": func() error { _, err := s.MarkPublished(ctx, "t", now, []int64{1}); return err },
		"release":        func() error { return s.Release(ctx, "t") },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%s: %v, want io.ErrUnexpectedEOF", name, err)
		}
		text := err.Error()
		if strings.Contains(text, "\n") || strings.Count(text, io.ErrUnexpectedEOF.Error()) != 1 {
			t.Errorf("%s: %q, want the cause once on one line", name, text)
		}
	}
}
