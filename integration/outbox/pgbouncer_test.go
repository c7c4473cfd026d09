package outbox_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox/postgres"
)

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
