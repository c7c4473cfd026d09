package outbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// waitTimeout bounds every wait for something the server or the dispatcher does.
const waitTimeout = 20 * time.Second

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// withParam adds a run-time parameter to a URL DSN.
func withParam(t testing.TB, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// ownTable migrates a table with a name of the test's own, so that its NOTIFY channel
// is the test's alone, and returns a store on it.
func ownTable(t testing.TB, e *env, opts ...postgres.Option) (*postgres.Store, postgres.TableName) {
	t.Helper()
	tbl, err := postgres.NewTableName("", randomName("outbox_"))
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(context.Background(), e.pool, postgres.WithTable(tbl)); err != nil {
		t.Fatal(err)
	}
	return postgres.New(e.pool, append(opts, postgres.WithTable(tbl))...), tbl
}

// signals is a Waker wrapper that reports every wake on a channel before passing it on.
type signals struct {
	inner outbox.Waker
	ch    chan struct{}
}

func (s *signals) Listen(ctx context.Context, wake func()) error {
	return s.inner.Listen(ctx, func() {
		select {
		case s.ch <- struct{}{}:
		default: // nobody is counting right now
		}
		wake()
	})
}

// notifyingPublisher reports every published row id on a channel.
type notifyingPublisher struct{ ids chan int64 }

func (p *notifyingPublisher) Publish(_ context.Context, _ transport.Destination, msgs ...transport.Message) error {
	for _, m := range msgs {
		p.ids <- rowID(m.Headers)
	}
	return nil
}

// receive waits for n values on ch.
func receive[T any](t *testing.T, ch <-chan T, n int, what string) []T {
	t.Helper()
	timeout := time.After(waitTimeout)
	var out []T
	for len(out) < n {
		select {
		case v := <-ch:
			out = append(out, v)
		case <-timeout:
			t.Fatalf("%s: %d of %d after %v", what, len(out), n, waitTimeout)
		}
	}
	return out
}

func enqueueOn(t *testing.T, e *env, s *postgres.Store, n int) {
	t.Helper()
	ctx := context.Background()
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("v")}}
	}
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		_, err := s.Enqueue(ctx, postgres.Pgx(tx), entries...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestListenerSurvivesItsConnectionBeingKilled kills the Listener's connection on the
// server, keeps it from reconnecting for a while, and shows the rows enqueued meanwhile
// go out by polling; then the Listener reconnects and commits wake the Processor again.
func TestListenerSurvivesItsConnectionBeingKilled(t *testing.T) {
	e := newEnv(t, nil)
	store, _ := ownTable(t, e)
	app := randomName("bg_listen_")
	dial := postgres.ConnString(withParam(t, e.dsn, "application_name", app))

	var connects atomic.Int32
	redialing := make(chan struct{})
	mayReconnect := make(chan struct{})
	gated := func(ctx context.Context, listen func(*pgx.Conn) error) error {
		if connects.Add(1) == 2 {
			close(redialing)
			select {
			case <-mayReconnect:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return dial(ctx, listen)
	}
	listening := make(chan uint32, 4)
	l, err := store.Listener(gated, postgres.WithReconnectDelay(time.Millisecond, time.Millisecond),
		postgres.WithOnListen(func(pid uint32) { listening <- pid }))
	if err != nil {
		t.Fatal(err)
	}
	woken := &signals{inner: l, ch: make(chan struct{}, 100)}
	pub := &notifyingPublisher{ids: make(chan int64, 100)}
	proc, err := outbox.NewProcessor(store, nil, pub, outbox.WithClassifier(outageOnError), outbox.WithWaker(woken), outbox.WithIDHeader(idHeader),
		outbox.WithPollInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()

	pid := receive(t, listening, 1, "listening")[0]
	receive(t, woken.ch, 1, "the wake on listening")
	enqueueOn(t, e, store, 1)
	receive(t, woken.ch, 1, "the notification of a commit")
	receive(t, pub.ids, 1, "rows published on notification")

	// Only the Listener's own backend: its pid, and the application name it was given.
	var killed bool
	err = e.pool.QueryRow(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE pid = $1 AND application_name = $2`, int32(pid), app).Scan(&killed)
	if err != nil || !killed {
		t.Fatalf("terminating the Listener's backend %d: %v, %v", pid, killed, err)
	}
	select {
	case <-redialing: // the Listener noticed and is kept from reconnecting
	case <-time.After(waitTimeout):
		t.Fatal("the Listener did not notice its connection was killed")
	}

	enqueueOn(t, e, store, 3)
	receive(t, pub.ids, 3, "rows published by polling while nobody listens")
	select {
	case <-woken.ch:
		t.Fatal("a wake arrived while the Listener was disconnected")
	default:
	}

	close(mayReconnect)
	if again := receive(t, listening, 1, "listening again")[0]; again == pid {
		t.Fatalf("listening again on the killed backend %d", pid)
	}
	receive(t, woken.ch, 1, "the wake on listening again")
	enqueueOn(t, e, store, 1)
	receive(t, woken.ch, 1, "the notification of a commit after reconnecting")
	receive(t, pub.ids, 1, "rows published after reconnecting")
}

// TestListenerConnectors listens through each kind of Connector and checks a commit
// wakes it, a rollback does not count, and the connection does not go back to a pool.
func TestListenerConnectors(t *testing.T) {
	e := newEnv(t, nil)
	store, _ := ownTable(t, e)
	db, err := sql.Open("pgx", e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pool := newPool(t, e.dsn, nil)

	for _, tc := range []struct {
		name    string
		connect postgres.Connector
		after   func(t *testing.T)
	}{
		{"conn string", postgres.ConnString(e.dsn), nil},
		{"pgxpool", postgres.PoolConn(pool), func(t *testing.T) {
			if n := pool.Stat().TotalConns(); n != 0 {
				t.Errorf("the pool holds %d connections after listening; the listener's must not come back", n)
			}
		}},
		{"database/sql", postgres.SQLConn(db), func(t *testing.T) {
			if n := db.Stats().OpenConnections; n != 0 {
				t.Errorf("database/sql holds %d connections after listening; the listener's must be discarded", n)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listening := make(chan uint32, 1)
			l, err := store.Listener(tc.connect, postgres.WithOnListen(func(pid uint32) { listening <- pid }))
			if err != nil {
				t.Fatal(err)
			}
			wakes := make(chan struct{}, 100)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Listen(ctx, func() { wakes <- struct{}{} }) }()
			receive(t, listening, 1, "listening")
			receive(t, wakes, 1, "the wake on listening")

			// A rolled-back enqueue sends nothing; the commit after it does.
			bg := context.Background()
			tx, err := e.pool.Begin(bg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Enqueue(bg, postgres.Pgx(tx), outbox.Entry{Destination: orders}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(bg); err != nil {
				t.Fatal(err)
			}
			enqueueOn(t, e, store, 1)
			receive(t, wakes, 1, "the notification of a commit")
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Listen = %v after cancel", err)
			}
			if len(wakes) != 0 {
				t.Errorf("%d wakes more than the commit's; the rolled-back enqueue notified", len(wakes))
			}
			if tc.after != nil {
				tc.after(t)
			}
		})
	}
}

// TestWithoutNotifyEnqueueSendsNothing: the polling-only store sends no NOTIFY.
func TestWithoutNotifyEnqueueSendsNothing(t *testing.T) {
	e := newEnv(t, nil)
	loud, tbl := ownTable(t, e)
	quiet := postgres.New(e.pool, postgres.WithTable(tbl), postgres.WithoutNotify())
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{tbl.Channel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	enqueueOn(t, e, quiet, 2)
	enqueueOn(t, e, loud, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := conn.WaitForNotification(ctx); err != nil {
		t.Fatal(err)
	}
	// The quiet commits came first: had they notified, one more would be waiting.
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil { // reads what the server sent meanwhile
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 0)
	defer cancelShort()
	if n, err := conn.WaitForNotification(short); err == nil {
		t.Fatalf("a second notification %+v: the WithoutNotify store sent one", n)
	}
}

// TestTwoServicesShareADatabase puts two outboxes, each in a schema of its own, in one
// database: neither claims, counts nor wakes for the other's rows.
func TestTwoServicesShareADatabase(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	var stores [2]*postgres.Store
	var tables [2]postgres.TableName
	for i := range stores {
		schema := randomName("svc_")
		t.Cleanup(func() {
			if _, err := e.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
				t.Errorf("drop schema %s: %v", schema, err)
			}
		})
		tbl, err := postgres.NewTableName(schema, "outbox")
		if err != nil {
			t.Fatal(err)
		}
		if err := postgres.Migrate(ctx, e.pool, postgres.WithTable(tbl)); err != nil {
			t.Fatal(err)
		}
		stores[i], tables[i] = postgres.New(e.pool, postgres.WithTable(tbl)), tbl
	}
	listening := make(chan uint32, 1)
	l, err := stores[1].Listener(postgres.ConnString(e.dsn), postgres.WithOnListen(func(pid uint32) { listening <- pid }))
	if err != nil {
		t.Fatal(err)
	}
	wakes := make(chan struct{}, 10)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Listen(lctx, func() { wakes <- struct{}{} }) }()
	receive(t, listening, 1, "listening")
	receive(t, wakes, 1, "the wake on listening")

	enqueueOn(t, e, stores[0], 3)
	enqueueOn(t, e, stores[1], 1)
	receive(t, wakes, 1, "the second service's notification")
	for i, want := range []int64{3, 1} {
		if n, _, err := stores[i].Backlog(ctx); n != want || err != nil {
			t.Errorf("service %d (%s): backlog %d, %v; want %d", i, tables[i], n, err, want)
		}
		recs, err := stores[i].Claim(ctx, outbox.ClaimRequest{Token: "t", Now: time.Now(), Limit: 10, Lease: time.Minute})
		if len(recs) != int(want) || err != nil {
			t.Errorf("service %d (%s): claimed %d, %v; want %d", i, tables[i], len(recs), err, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	if len(wakes) != 0 {
		t.Errorf("the second service's Listener was woken %d more times: by the first one's commits", len(wakes))
	}
}
