package outbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
	"github.com/jackc/pgx/v5"
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

// TestProcessorWakesOnCommitByDefault: a Processor on a Store made from a pool,
// given no Waker, publishes a committed row long before its poll interval (an hour
// here); made WithoutNotify, the Store gives no Waker and the row waits.
func TestProcessorWakesOnCommitByDefault(t *testing.T) {
	dsn := harness.PostgresSchema(t)
	db := newPool(t, dsn, nil)
	if err := postgres.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	if w := postgres.New(db, postgres.WithoutNotify()).CommitWaker(); w != nil {
		t.Errorf("a Store made WithoutNotify gives a Waker: %T", w)
	}
	// A table of its own, so that its channel (and LISTEN) are the test's alone.
	tbl, err := postgres.NewTableName("", randomName("outbox_"))
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(context.Background(), db, postgres.WithTable(tbl)); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(db, postgres.WithTable(tbl))
	pub := newCounting(nopPublisher{})
	runRelays(t, 1, store, pub, nil, outbox.WithPollInterval(time.Hour))
	waitFor(t, "the Store's Listener to listen", 10*time.Second, func() bool {
		var n int
		err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE query = $1`,
			"LISTEN "+pgx.Identifier{tbl.Channel()}.Sanitize()).Scan(&n)
		return err == nil && n == 1
	})
	committed := time.Now()
	ids := enqueueRows(t, db, store, 1)
	done := waitPublished(t, pub, ids, waitTimeout) // the poll interval is an hour: no need for a tight bound
	t.Logf("published %v after the commit, poll interval 1h", done.Sub(committed).Round(time.Millisecond))
}

// waitFor polls cond until it holds or within passes (then the test fails).
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
	}
}

// bouncerDSN is dsn's database reached through PgBouncer at addr with pgx's exec
// mode mode. The search_path a session parameter would set does not survive
// transaction pooling, so tables are named with their schema instead.
func bouncerDSN(t *testing.T, dsn, addr, mode string) (bounced, schema string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema = u.Query().Get("search_path")
	q := url.Values{"sslmode": {"disable"}, "connect_timeout": {"5"}}
	if mode != "" {
		q.Set("default_query_exec_mode", mode)
	}
	u.Host, u.RawQuery = addr, q.Encode()
	return u.String(), schema
}

// TestPgBouncer (transaction pooling; a short name, as the schema is named after it)
// runs the outbox, enqueues included,
// through a PgBouncer of the test's own in transaction mode, with each pgx exec mode
// that is safe there (docs/outbox-database.md): three relays, every row published
// once, no error. The Listener, behind the same PgBouncer, reports that it receives
// nothing.
func TestPgBouncer(t *testing.T) {
	dsn := harness.PostgresSchema(t)
	direct := newPool(t, dsn, nil)
	bouncer := harness.StartPgBouncer(t, upstreamOf(t, dsn), "transaction")
	for _, mode := range []string{"exec", "simple_protocol", "cache_describe"} {
		t.Run(mode, func(t *testing.T) {
			bounced, schema := bouncerDSN(t, dsn, bouncer.Addr(), mode)
			tbl, err := postgres.NewTableName(schema, "ob_"+mode[:min(len(mode), 6)])
			if err != nil {
				t.Fatal(err)
			}
			if err := postgres.Migrate(context.Background(), direct, postgres.WithTable(tbl)); err != nil {
				t.Fatal(err)
			}
			pool := newPool(t, bounced, nil)
			store := postgres.New(pool, postgres.WithTable(tbl), postgres.WithoutNotify())
			pub := newCounting(nopPublisher{})
			log := &errorLog{}
			runRelays(t, 3, store, pub, log)
			var ids []int64
			for range 3 {
				ids = append(ids, enqueueRows(t, pool, store, 500)...)
			}
			waitPublished(t, pub, ids, 60*time.Second)
			if d := duplicates(pub, ids); d != 0 {
				t.Errorf("%d duplicate publishes", d)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if log.last != nil {
				t.Errorf("relays reported errors, the last: %v", log.last)
			}
		})
	}
	t.Run("listener", func(t *testing.T) {
		bounced, schema := bouncerDSN(t, dsn, bouncer.Addr(), "exec")
		tbl, err := postgres.NewTableName(schema, "ob_listen")
		if err != nil {
			t.Fatal(err)
		}
		if err := postgres.Migrate(context.Background(), direct, postgres.WithTable(tbl)); err != nil {
			t.Fatal(err)
		}
		store := postgres.New(newPool(t, bounced, nil), postgres.WithTable(tbl), postgres.WithTimeout(time.Second))
		errs := make(chan error, 10)
		l, err := store.Listener(postgres.ConnString(bounced), postgres.WithListenErrors(func(err error) {
			select {
			case errs <- err:
			default:
			}
		}), postgres.WithOnListen(func(uint32) { t.Error("the Listener reported listening behind transaction pooling") }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Listen(ctx, func() {}) }()
		defer func() { cancel(); <-done }()
		// A loaded machine may also time the LISTEN itself out (the Store's timeout is
		// a second): the Listener reports that and tries again. What it must come to is
		// ErrNotReceiving.
		timeout := time.After(waitTimeout)
		var seen []error
		for len(seen) < 5 {
			select {
			case err := <-errs:
				if errors.Is(err, postgres.ErrNotReceiving) {
					return
				}
				seen = append(seen, err)
			case <-timeout:
				t.Fatalf("the Listener did not report ErrNotReceiving in %v; reported %v", waitTimeout, seen)
			}
		}
		t.Errorf("Listener reported %v; want ErrNotReceiving", seen)
	})
}
