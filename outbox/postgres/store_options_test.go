package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

var pgT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// A Store WithTable works on that table only (Migrate creates it); WithoutNotify
// enqueues without a NOTIFY and has no CommitWaker; rows enqueued through a
// database/sql transaction (SQL) read back as written.
func TestStoreOnANamedTableWithoutNotify(t *testing.T) {
	tbl, err := postgres.NewTableName("", "pg_orders_outbox")
	if err != nil {
		t.Fatal(err)
	}
	s, pool := pgTestStore(t, postgres.WithTable(tbl), postgres.WithoutNotify())
	ctx := context.Background()
	if s.CommitWaker() != nil {
		t.Fatal("a Store WithoutNotify has a CommitWaker")
	}
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{tbl.Channel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	ids, err := s.Enqueue(ctx, postgres.SQL(tx), outbox.Entry{Destination: d, Message: transport.Message{Key: []byte("a")}},
		outbox.Entry{Destination: d, Message: transport.Message{Key: []byte("b")}})
	if err != nil || len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("Enqueue through database/sql: %v, %v", ids, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"a", "b"} {
		r, err := s.Get(ctx, ids[i])
		if err != nil || string(r.Message.Key) != key || r.Destination != d {
			t.Fatalf("Get(%d) = %+v, %v", ids[i], r, err)
		}
	}
	if _, err := s.Get(ctx, ids[1]+1); !errors.Is(err, postgres.ErrNotFound) {
		t.Fatalf("Get of no row: %v, want ErrNotFound", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl.String()).Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows in %s: %d, %v", tbl, n, err)
	}
	if _, err := pool.Exec(ctx, "SELECT pg_notify($1, 'marker')", tbl.Channel()); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if note, err := listener.Conn().WaitForNotification(wctx); err != nil || note.Payload != "marker" {
		t.Fatalf("first notification on the channel: %+v, %v; want only the marker (no NOTIFY on Enqueue)", note, err)
	}
}

// A row whose headers another program wrote in a shape Enqueue does not is read back
// marked Undecodable, for the Processor to make it dead, rather than failing.
func TestRowWithForeignHeadersIsUndecodable(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx := context.Background()
	var id int64
	err := pool.QueryRow(ctx, `INSERT INTO brokerguard_outbox (destination, payload, headers, created_at, visible_after)
		VALUES ('kafka:orders', 'x', '{"not": "a list"}', now(), now()) RETURNING id`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Get(ctx, id)
	if err != nil || len(r.Undecodable) < len("headers: ") || r.Undecodable[:len("headers: ")] != "headers: " {
		t.Fatalf("Get of a row with foreign headers: Undecodable %q, %v", r.Undecodable, err)
	}
}

// BacklogByDestination counts each destination's pending rows and the age of its
// oldest on the Store's clock, leaving out rows whose destination does not parse.
func TestBacklogByDestinationOnPostgres(t *testing.T) {
	clock := fakeclock.New(pgT0)
	s, pool := pgTestStore(t, postgres.WithClock(clock))
	ctx := context.Background()
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	refunds := transport.Destination{Broker: "kafka", Name: "refunds"}
	enqueue := func(d transport.Destination, n int) {
		entries := make([]outbox.Entry, n)
		for i := range entries {
			entries[i] = outbox.Entry{Destination: d}
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := s.Enqueue(ctx, postgres.Pgx(tx), entries...)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(orders, 3)
	clock.Advance(time.Minute)
	enqueue(refunds, 1)
	enqueue(orders, 1)
	if _, err := pool.Exec(ctx, `INSERT INTO brokerguard_outbox (destination, payload, created_at, visible_after)
		VALUES ('no broker', 'x', $1, $1)`, pgT0); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	got, err := s.BacklogByDestination(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[transport.Destination]outbox.DestinationBacklog{
		orders:  {Destination: orders, Pending: 4, Oldest: time.Minute + time.Second},
		refunds: {Destination: refunds, Pending: 1, Oldest: time.Second},
	}
	if len(got) != len(want) {
		t.Fatalf("BacklogByDestination = %+v, want %+v", got, want)
	}
	for _, b := range got {
		if b != want[b.Destination] {
			t.Fatalf("BacklogByDestination = %+v, want %+v", got, want)
		}
	}
}

// Each Connector gives the Listener a connection it listens on, and the Listener's
// steps are bounded even when its Store's calls are not (WithTimeout(0)).
func TestListenerConnectorsListen(t *testing.T) {
	pool := pgTestPool(t)
	for _, tc := range []struct {
		name    string
		opts    []postgres.Option
		connect func(*pgxpool.Pool) postgres.Connector
	}{
		{"PoolConn", nil, postgres.PoolConn},
		{"SQLConn", nil, func(p *pgxpool.Pool) postgres.Connector { return postgres.SQLConn(stdlib.OpenDBFromPool(p)) }},
		{"ConnConfig, store without timeout", []postgres.Option{postgres.WithTimeout(0)}, func(p *pgxpool.Pool) postgres.Connector {
			return postgres.ConnConfig(p.Config().ConnConfig.Copy())
		}},
		{"CommitWaker", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := postgres.New(pool, tc.opts...)
			pids, errs := make(chan uint32, 1), make(chan error, 1)
			var w outbox.Waker
			if tc.connect == nil {
				if w = s.CommitWaker(); w == nil {
					t.Fatal("a Store on a pool has no CommitWaker")
				}
				pids = nil // CommitWaker takes no options: a wake says it listens
			} else {
				l, err := s.Listener(tc.connect(pool), postgres.WithOnListen(func(pid uint32) { pids <- pid }),
					postgres.WithListenErrors(func(err error) {
						select {
						case errs <- err:
						default:
						}
					}))
				if err != nil {
					t.Fatal(err)
				}
				w = l
			}
			ctx, cancel := context.WithCancel(context.Background())
			woken := make(chan struct{}, 10)
			done := make(chan error, 1)
			go func() { done <- w.Listen(ctx, func() { woken <- struct{}{} }) }()
			select {
			case pid := <-pids:
				if pid == 0 {
					t.Error("listening on a connection without a server process")
				}
			case <-woken:
			case err := <-errs:
				t.Errorf("the listener failed: %v", err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Listen returned %v when its context ended", err)
			}
		})
	}
}

// Enqueue through a database/sql transaction that has failed returns the server's
// error and no ids.
func TestEnqueueThroughAFailedSQLTransactionFails(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 succeeded")
	}
	ids, err := s.Enqueue(ctx, postgres.SQL(tx), outbox.Entry{Destination: transport.Destination{Broker: "kafka", Name: "orders"}})
	if err == nil || ids != nil {
		t.Fatalf("Enqueue in an aborted transaction: %v, %v; want the server's error", ids, err)
	}
}

// A published row reads back with the time it was settled.
func TestPublishedRowReadsBackItsSettledTime(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx := context.Background()
	now := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	id := mpClaimOne(t, s, pool, "pgsettled", now)
	if n, err := s.MarkPublished(ctx, "pgsettled", now, []int64{id}); err != nil || n != 1 {
		t.Fatalf("MarkPublished = %d, %v", n, err)
	}
	r, err := s.Get(ctx, id)
	if err != nil || !r.SettledAt.Equal(now) {
		t.Fatalf("Get of a published row: settled at %v (%v), want %v", r.SettledAt, err, now)
	}
}
