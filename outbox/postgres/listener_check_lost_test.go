package postgres_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// A connection lost while the Listener waits for its receive check is reported as
// the server's error, not as ErrNotReceiving (which points at a pooler in
// transaction mode, a configuration to change).
func TestListenerConnectionLostDuringTheCheckIsNotErrNotReceiving(t *testing.T) {
	pool := pgTestPool(t)
	// Instead of each check's NOTIFY, the Listener's connection (its pid is in the
	// payload) is terminated.
	s := postgres.New(mpOnCheckDB{pool, func(ctx context.Context, _, payload string) error {
		pid, _, _ := strings.Cut(strings.TrimPrefix(payload, "brokerguard-check:"), ":")
		n, err := strconv.Atoi(pid)
		if err != nil {
			return err
		}
		_, err = pool.Exec(ctx, "SELECT pg_terminate_backend($1)", n)
		return err
	}})
	_, errs := pgListenEvents(t, func(opts ...postgres.ListenerOption) (*postgres.Listener, error) {
		return s.Listener(postgres.ConnConfig(pool.Config().ConnConfig.Copy()), opts...)
	})
	err := <-errs
	var pgErr *pgconn.PgError
	if errors.Is(err, postgres.ErrNotReceiving) || !errors.As(err, &pgErr) || pgErr.Code != "57P01" {
		t.Fatalf("connection terminated during the check: %v; want the server's admin_shutdown (57P01)", err)
	}
}
