// Package mysqloutbox_test runs the MySQL outbox store against real MariaDB servers:
// relays through the faults a database brings (a restart, a silent connection, lock
// waits, read-only), on a server of each test's own, and the admin API, CLI and
// telemetry on the machine's server.
package mysqloutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	bgmysql "github.com/brokerguard/brokerguard/outbox/mysql"
	"github.com/brokerguard/brokerguard/transport"
)

// idHeader carries the row id on every published message.
const idHeader = "outbox-id"

var dests = []transport.Destination{{Broker: "kafka", Name: "orders"}, {Broker: "kafka", Name: "emails"}}

// wait bounds every wait of these tests: only a broken build reaches it.
const wait = 2 * time.Minute

// rowWatch is a publisher that accepts everything and counts the publishes of each
// row; waiters are woken by each publish, never by a timer.
type rowWatch struct {
	mu      sync.Mutex // guards the fields below
	seen    map[int64]int
	total   int
	changed chan struct{} // closed and replaced on every publish
}

func newRowWatch() *rowWatch {
	return &rowWatch{seen: map[int64]int{}, changed: make(chan struct{})}
}

func (w *rowWatch) Publish(_ context.Context, _ transport.Destination, msgs ...transport.Message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range msgs {
		for _, h := range m.Headers {
			if h.Key == idHeader {
				id, _ := strconv.ParseInt(string(h.Value), 10, 64)
				w.seen[id]++
				w.total++
			}
		}
	}
	close(w.changed)
	w.changed = make(chan struct{})
	return nil
}

// until blocks until cond, called under the lock after each publish, holds; the
// test fails after wait, saying what.
func (w *rowWatch) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	bound := time.NewTimer(wait)
	defer bound.Stop()
	for {
		w.mu.Lock()
		ok, ch := cond(), w.changed
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-bound.C:
			t.Fatalf("not %s after %v", what, wait)
		}
	}
}

// atLeast waits until n publishes were made.
func (w *rowWatch) atLeast(t *testing.T, n int) {
	t.Helper()
	w.until(t, fmt.Sprintf("%d rows published", n), func() bool { return w.total >= n })
}

// all waits until every id was published.
func (w *rowWatch) all(t *testing.T, ids []int64) {
	t.Helper()
	w.until(t, fmt.Sprintf("all %d rows published", len(ids)), func() bool { return w.missing(ids) == 0 })
}

// missing counts the ids not published; call it under the lock.
func (w *rowWatch) missing(ids []int64) (n int) {
	for _, id := range ids {
		if w.seen[id] == 0 {
			n++
		}
	}
	return n
}

// duplicates counts the publishes of ids beyond the first.
func (w *rowWatch) duplicates(ids []int64) (n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		n += max(w.seen[id]-1, 0)
	}
	return n
}

// relayErrors keeps the errors each relay's Run reported; waiters are woken by each.
type relayErrors struct {
	mu      sync.Mutex
	errs    map[int][]error
	changed chan struct{}
}

// newRelayErrors returns an empty log whose errors are written out if the test fails.
func newRelayErrors(t *testing.T) *relayErrors {
	e := &relayErrors{errs: map[int][]error{}, changed: make(chan struct{})}
	t.Cleanup(func() {
		if t.Failed() {
			e.mu.Lock()
			defer e.mu.Unlock()
			for r, errs := range e.errs {
				t.Logf("relay %d: %d errors, the last %d: %v", r, len(errs), min(len(errs), 5), errs[max(len(errs)-5, 0):])
			}
		}
	})
	return e
}

func (e *relayErrors) handler(relay int) func(error) {
	return func(err error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.errs[relay] = append(e.errs[relay], err)
		close(e.changed)
		e.changed = make(chan struct{})
	}
}

// mark returns how many errors each of n relays reported so far.
func (e *relayErrors) mark(n int) []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]int, n)
	for r := range out {
		out[r] = len(e.errs[r])
	}
	return out
}

// eachSince waits until every relay reported an error that matches after mark, and
// returns the first such error of each.
func (e *relayErrors) eachSince(t *testing.T, mark []int, matches func(error) bool) []error {
	t.Helper()
	bound := time.NewTimer(wait)
	defer bound.Stop()
	for {
		e.mu.Lock()
		var firsts []error
		for r, m := range mark {
			for _, err := range e.errs[r][m:] {
				if matches(err) {
					firsts = append(firsts, err)
					break
				}
			}
		}
		ch := e.changed
		e.mu.Unlock()
		if len(firsts) == len(mark) {
			return firsts
		}
		select {
		case <-ch:
		case <-bound.C:
			t.Fatalf("%d of %d relays reported the error looked for after %v; errors: %v", len(firsts), len(mark), wait, e.errs)
		}
	}
}

// classify counts no publish error against a broker: the publisher here never fails.
func classify(error) breaker.Outcome { return breaker.Neutral }

// runRelays runs n Processors on store until the test ends, each reporting its
// errors to errs (nil: Run's default, log/slog). The test fails if a Run returns
// while its context lasts.
func runRelays(t *testing.T, n int, store outbox.Store, pub transport.Publisher, errs *relayErrors, opts ...outbox.ProcessorOption) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range n {
		o := append([]outbox.ProcessorOption{outbox.WithIDHeader(idHeader), outbox.WithOwner(fmt.Sprint("relay-", i)),
			outbox.WithClassifier(classify)}, opts...)
		if errs != nil {
			o = append(o, outbox.WithErrorHandler(errs.handler(i)))
		}
		p, err := outbox.NewProcessor(store, nil, pub, o...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			err := p.Run(ctx)
			if ctx.Err() == nil {
				t.Errorf("relay %d: Run returned %v while its context lasted", i, err)
			}
		})
	}
}

// enqueue commits n rows, each with its own key, for the two destinations, in
// transactions of 100, and returns their ids.
func enqueue(t *testing.T, db *sql.DB, store *bgmysql.Store, n int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var ids []int64
	for lo := 0; lo < n; lo += 100 {
		entries := make([]outbox.Entry, 0, 100)
		for i := lo; i < min(lo+100, n); i++ {
			entries = append(entries, outbox.Entry{Destination: dests[i%2], Message: transport.Message{
				Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v")}})
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := store.Enqueue(ctx, tx, entries...)
		if err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		if err := store.Commit(tx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// open returns a pool on dsn, closed when the test ends, and a Store on it.
func open(t *testing.T, dsn string, opts ...bgmysql.Option) (*sql.DB, *bgmysql.Store) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := bgmysql.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return db, s
}

// dumpOnFailure logs, if the test fails, the server's sessions and the outbox's
// pending and leased rows, as they are when the test ends.
func dumpOnFailure(t *testing.T, db *sql.DB) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rows, err := db.Query("SELECT id, command, time, COALESCE(state, ''), COALESCE(LEFT(info, 120), '') FROM information_schema.processlist")
		if err != nil {
			t.Log(err)
			return
		}
		for rows.Next() {
			var (
				id, secs            int64
				cmd, state, running string
			)
			_ = rows.Scan(&id, &cmd, &secs, &state, &running)
			t.Logf("session %d %s %ds %s: %s", id, cmd, secs, state, running)
		}
		rows.Close()
		var pending, leased int
		_ = db.QueryRow("SELECT COUNT(*), COUNT(lease_owner) FROM "+bgmysql.Table+" WHERE status = 'pending'").Scan(&pending, &leased)
		t.Logf("pending rows %d, leased %d", pending, leased)
	})
}
