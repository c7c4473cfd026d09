package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// pgCheckDB is a Store's DB on a pool that counts the receive checks' NOTIFYs and,
// when drop is set, swallows them (as a pooler in transaction mode does) instead of
// sending them.
type pgCheckDB struct {
	*pgxpool.Pool
	drop   bool
	mu     sync.Mutex
	checks int
	sent   chan int // told each check's number
}

func (db *pgCheckDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, "pg_notify") && len(args) == 2 {
		if p, _ := args[1].(string); strings.HasPrefix(p, "brokerguard-check:") {
			db.mu.Lock()
			db.checks++
			n := db.checks
			db.mu.Unlock()
			select {
			case db.sent <- n:
			default:
			}
			if db.drop {
				return pgconn.CommandTag{}, nil
			}
		}
	}
	return db.Pool.Exec(ctx, sql, args...)
}

// pgListenEvents runs l until the test ends, passing on its pids and errors.
func pgListenEvents(t *testing.T, l func(...postgres.ListenerOption) (*postgres.Listener, error)) (pids chan uint32, errs chan error) {
	t.Helper()
	pids, errs = make(chan uint32, 100), make(chan error, 100)
	listener, err := l(postgres.WithOnListen(func(pid uint32) { pids <- pid }),
		postgres.WithListenErrors(func(err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- listener.Listen(ctx, func() {}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	})
	return pids, errs
}

// A connection that stays idle is checked (a NOTIFY to itself) every interval and
// kept while the checks come back: no error, no new connection.
func TestListenerChecksAnIdleConnectionAndKeepsIt(t *testing.T) {
	pool := pgTestPool(t)
	db := &pgCheckDB{Pool: pool, sent: make(chan int, 100)}
	s := postgres.New(db)
	pids, errs := pgListenEvents(t, func(opts ...postgres.ListenerOption) (*postgres.Listener, error) {
		return s.Listener(postgres.ConnConfig(pool.Config().ConnConfig.Copy()), append(opts, postgres.WithReceiveCheck(time.Millisecond))...)
	})
	for n := 0; n < 4; {
		select {
		case n = <-db.sent:
		case err := <-errs:
			t.Fatalf("after check %d: %v", n, err)
		}
	}
	select {
	case err := <-errs:
		t.Fatalf("an idle connection whose checks come back failed: %v", err)
	default:
	}
	if len(pids) != 1 {
		t.Fatalf("listened %d times over 4 checks, want once", len(pids))
	}
}

// A check whose NOTIFY never comes back (a pooler in transaction mode) is
// ErrNotReceiving within the Store's timeout, and the Listener never reports
// listening.
func TestListenerCheckThatNeverArrivesIsErrNotReceiving(t *testing.T) {
	pool := pgTestPool(t)
	db := &pgCheckDB{Pool: pool, drop: true, sent: make(chan int, 100)}
	s := postgres.New(db, postgres.WithTimeout(300*time.Millisecond))
	pids, errs := pgListenEvents(t, func(opts ...postgres.ListenerOption) (*postgres.Listener, error) {
		return s.Listener(postgres.ConnConfig(pool.Config().ConnConfig.Copy()), append(opts, postgres.WithReconnectDelay(time.Millisecond, time.Millisecond))...)
	})
	var err error
	for range 5 { // a loaded server may also time a LISTEN out
		if err = <-errs; errors.Is(err, postgres.ErrNotReceiving) {
			break
		}
	}
	if !errors.Is(err, postgres.ErrNotReceiving) {
		t.Fatalf("a check that never arrives: %v, want ErrNotReceiving", err)
	}
	if len(pids) != 0 {
		t.Fatal("reported listening although no check came back")
	}
}

var _ postgres.DB = (*pgCheckDB)(nil)
