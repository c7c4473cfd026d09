package postgres_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// After a connection that listened breaks, the Listener waits its first reconnect
// delay again, not the one its earlier failed attempts had doubled up to: three
// refused attempts (waits of 100, 200 and 400ms), then a real connection that
// listens and is terminated by the server, then refusals again — the waits start
// over at 100ms and double. The bubble's clock stands still while the goroutines
// wait on the network, so the attempts' times are exact.
func TestListenerReconnectDelayStartsOverAfterAConnectionListened(t *testing.T) {
	cfg, err := pgx.ParseConfig(pgTestDSN())
	if err != nil {
		t.Fatal(err)
	}
	if c, err := pgx.ConnectConfig(context.Background(), cfg); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is required under CI=true: %v", err)
		}
		t.Skipf("PostgreSQL unreachable at DATABASE_URL: %v", err)
	} else {
		c.Close(context.Background())
	}
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// The Store's connection: it sends the receive checks and kills the
		// Listener's connection once that listens.
		db, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close(context.WithoutCancel(ctx))
		s := postgres.New(db)
		start := time.Now()
		var attempts []time.Duration
		var listened []uint32
		connect := func(ctx context.Context, listen func(*pgx.Conn) error) error {
			attempts = append(attempts, time.Since(start))
			switch len(attempts) {
			case 4:
				return postgres.ConnConfig(cfg.Copy())(ctx, listen)
			case 6:
				cancel()
			}
			return errPgRefused
		}
		l, err := s.Listener(connect, postgres.WithReconnectDelay(100*time.Millisecond, time.Hour),
			postgres.WithOnListen(func(pid uint32) {
				listened = append(listened, pid)
				var ok bool
				if err := db.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
					t.Errorf("terminating the Listener's backend %d: %v, %v", pid, ok, err)
				}
			}),
			postgres.WithListenErrors(func(error) {}))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Listen(ctx, func() {}); err != nil {
			t.Fatalf("Listen returned %v when its context ended, want nil", err)
		}
		if len(listened) != 1 {
			t.Fatalf("listened %d times, want once (on the fourth attempt)", len(listened))
		}
		ms := time.Millisecond
		// 0, +100, +200, +400: the fourth listens and breaks at once; then +100, +200.
		want := []time.Duration{0, 100 * ms, 300 * ms, 700 * ms, 800 * ms, 1000 * ms}
		if fmt.Sprint(attempts) != fmt.Sprint(want) {
			t.Fatalf("attempts at %v, want %v", attempts, want)
		}
	})
}
