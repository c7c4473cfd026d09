package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// The reconnect delays must be 0 < first <= ceiling (equal is fine), and the
// receive check's interval positive; a Listener needs a Connector.
func TestListenerOptionBounds(t *testing.T) {
	s := postgres.New(&pgSilentDB{})
	connect := postgres.ConnString("postgres://127.0.0.1/none")
	for _, tc := range []struct {
		opts []postgres.ListenerOption
		ok   bool
	}{
		{nil, true},
		{[]postgres.ListenerOption{postgres.WithReconnectDelay(time.Second, time.Second)}, true},
		{[]postgres.ListenerOption{postgres.WithReconnectDelay(time.Millisecond, time.Second)}, true},
		{[]postgres.ListenerOption{postgres.WithReconnectDelay(time.Second, time.Second-1)}, false},
		{[]postgres.ListenerOption{postgres.WithReconnectDelay(0, time.Second)}, false},
		{[]postgres.ListenerOption{postgres.WithReconnectDelay(-time.Second, time.Second)}, false},
		{[]postgres.ListenerOption{postgres.WithReceiveCheck(time.Nanosecond)}, true},
		{[]postgres.ListenerOption{postgres.WithReceiveCheck(0)}, false},
	} {
		l, err := s.Listener(connect, tc.opts...)
		if (err == nil) != tc.ok || (l != nil) != tc.ok {
			t.Errorf("Listener with %d options: %v, %v; want accepted %v", len(tc.opts), l, err, tc.ok)
		}
	}
	if l, err := s.Listener(nil); err == nil || l != nil {
		t.Errorf("Listener(nil): %v, %v; want an error", l, err)
	}
}

var errPgRefused = errors.New("connection refused")

// While it cannot connect, a Listener tries again after a delay that starts at the
// first and doubles up to the ceiling, passing each error to WithListenErrors; it
// returns nil when its context ends.
func TestListenerReconnectDelaysDoubleToTheCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := postgres.New(&pgSilentDB{})
		start := time.Now()
		var attempts []time.Duration
		var errs []error
		connect := func(ctx context.Context, _ func(*pgx.Conn) error) error {
			attempts = append(attempts, time.Since(start))
			return errPgRefused
		}
		l, err := s.Listener(connect, postgres.WithReconnectDelay(100*time.Millisecond, time.Second),
			postgres.WithListenErrors(func(err error) { errs = append(errs, err) }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second+time.Millisecond)
		defer cancel()
		if err := l.Listen(ctx, func() { t.Error("woken without a connection") }); err != nil {
			t.Fatalf("Listen returned %v when its context ended, want nil", err)
		}
		ms := time.Millisecond
		want := []time.Duration{0, 100 * ms, 300 * ms, 700 * ms, 1500 * ms, 2500 * ms} // the next, at 3.5s, is after the end
		if fmt.Sprint(attempts) != fmt.Sprint(want) {
			t.Fatalf("attempts at %v, want %v", attempts, want)
		}
		if len(errs) != len(attempts) || !errors.Is(errs[0], errPgRefused) {
			t.Fatalf("%d errors passed on for %d attempts, first %v", len(errs), len(attempts), errs[0])
		}
	})
}

// A Listener on the real server wakes on a commit, and when its connection is killed
// it passes the error on, listens again on a new connection and wakes, since rows
// may have been committed meanwhile.
func TestListenerReconnectsAfterItsConnectionIsKilled(t *testing.T) {
	s, pool := pgTestStore(t)
	var mu sync.Mutex
	var errs []error
	pids := make(chan uint32, 4)
	wakes := make(chan struct{}, 100)
	l, err := s.Listener(postgres.ConnConfig(pool.Config().ConnConfig.Copy()),
		postgres.WithReconnectDelay(time.Millisecond, time.Hour),
		postgres.WithListenErrors(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }),
		postgres.WithOnListen(func(pid uint32) { pids <- pid }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Listen(ctx, func() { wakes <- struct{}{} }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	}()
	first := <-pids
	<-wakes // the wake after listening
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := s.Enqueue(ctx, postgres.Pgx(tx), outbox.Entry{Destination: d})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	<-wakes // the commit's notification
	for range 2 {
		if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", first); err != nil {
			t.Fatal(err)
		}
		second := <-pids
		if second == first {
			t.Fatalf("listening again on the killed connection %d", first)
		}
		<-wakes
		first = second
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 2 {
		t.Fatalf("%d errors passed on for two killed connections: %v", len(errs), errs)
	}
}

// WithListenErrors(nil) drops the errors: the Listener goes on reconnecting.
func TestListenerWithoutAnErrorHandler(t *testing.T) {
	mpListenRefused(t, 2500*time.Millisecond, 3, postgres.WithListenErrors(nil))
}
