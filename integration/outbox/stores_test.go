package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
	"github.com/jackc/pgx/v5"
)

// storeCase is one Store under test, with what a test needs around it.
type storeCase struct {
	store outbox.Store
	env   *env // the PostgreSQL table and the kfake cluster (also used by the memory case, for Kafka)
	// enqueue commits entries and returns their ids; tryEnqueue returns the error.
	enqueue    func(t testing.TB, entries ...outbox.Entry) []int64
	tryEnqueue func(entries ...outbox.Entry) ([]int64, error)
	get        func(t testing.TB, id int64) outbox.Record
	// pg is set for the PostgreSQL case.
	pg bool
}

// onBothStores runs test against the memory store and the PostgreSQL store, each on
// a fresh table, a fresh kfake cluster and the clock test gets.
func onBothStores(t *testing.T, test func(t *testing.T, clock *fakeclock.Clock, sc storeCase)) {
	t.Run("memory", func(t *testing.T) {
		clock := fakeclock.New(start())
		e := newEnv(t, clock)
		mem := memory.New(clock)
		test(t, clock, storeCase{
			store: mem, env: e,
			tryEnqueue: func(entries ...outbox.Entry) ([]int64, error) { return mem.Enqueue(context.Background(), entries...) },
			enqueue: func(t testing.TB, entries ...outbox.Entry) []int64 {
				t.Helper()
				ids, err := mem.Enqueue(context.Background(), entries...)
				if err != nil {
					t.Fatal(err)
				}
				return ids
			},
			get: func(t testing.TB, id int64) outbox.Record {
				t.Helper()
				r, ok := mem.Get(id)
				if !ok {
					t.Fatalf("row %d not found", id)
				}
				return r
			},
		})
	})
	t.Run("postgres", func(t *testing.T) {
		clock := fakeclock.New(start())
		e := newEnv(t, clock)
		test(t, clock, storeCase{
			store: e.store, env: e, pg: true,
			enqueue: e.commit,
			tryEnqueue: func(entries ...outbox.Entry) (ids []int64, err error) {
				ctx := context.Background()
				err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
					ids, err = e.store.Enqueue(ctx, postgres.Pgx(tx), entries...)
					return err
				})
				return ids, err
			},
			get: e.get,
		})
	})
}

// TestMemoryStoreMatchesPostgres runs one sequence of Store calls on the memory store
// and on the PostgreSQL store and requires the same answers and the same rows, so
// that unit tests on the memory store say something about production.
func TestMemoryStoreMatchesPostgres(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	mem := memory.New(clock)
	entries := []outbox.Entry{
		{Destination: orders, Message: transport.Message{Key: []byte("k1"), Value: []byte("o1")}},
		{Destination: orders, Message: transport.Message{Key: []byte("k1"), Value: []byte("o2")}},
		{Destination: orders, Message: transport.Message{Key: []byte("k2"), Value: []byte("o3")}},
		{Destination: emails, Message: transport.Message{Value: []byte("e1")}},
		{Destination: emails, Message: transport.Message{Value: []byte("e2")}},
	}
	ctx := context.Background()
	memIDs, err := mem.Enqueue(ctx, entries...)
	if err != nil {
		t.Fatal(err)
	}
	pgIDs, err := e.store.Enqueue(ctx, postgres.Pgx(e.pool), entries...)
	if err != nil {
		t.Fatal(err)
	}

	memLog := storeScript(ctx, mem, clock.Now(), memIDs)
	pgLog := storeScript(ctx, e.store, clock.Now(), pgIDs)
	for i := range max(len(memLog), len(pgLog)) {
		var m, p string
		if i < len(memLog) {
			m = memLog[i]
		}
		if i < len(pgLog) {
			p = pgLog[i]
		}
		if m != p {
			t.Errorf("step %d:\n  memory:   %s\n  postgres: %s", i, m, p)
		}
	}
	for i := range memIDs {
		m, _ := mem.Get(memIDs[i])
		p := e.get(t, pgIDs[i])
		if got, want := rowState(p, pgIDs), rowState(m, memIDs); got != want {
			t.Errorf("row %d:\n  memory:   %s\n  postgres: %s", i, want, got)
		}
	}
}

// storeScript makes the same calls on s and logs every answer with ids given as their
// enqueue position, so that two stores' logs compare equal. Rows 0 and 1 share key k1
// of orders, row 2 has key k2, rows 3 and 4 (emails) have no key.
func storeScript(ctx context.Context, s outbox.Store, t0 time.Time, ids []int64) []string {
	var log []string
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	claim := func(token string, now time.Time, limit int) {
		recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: token, Now: now, Limit: limit, Lease: time.Minute, ProbeLimit: 1})
		line := fmt.Sprintf("claim %s: err %v", token, err)
		for _, r := range recs {
			line += " " + rowState(r, ids)
		}
		log = append(log, line)
	}
	pick := func(rows ...int) []int64 {
		out := make([]int64, len(rows))
		for i, r := range rows {
			out[i] = ids[r]
		}
		return out
	}
	deferral := func(token string, now time.Time, rows ...int) {
		n, err := s.Defer(ctx, outbox.Deferral{Token: token, IDs: pick(rows...), Now: now})
		log = append(log, fmt.Sprintf("defer %s: %d, err %v", token, n, err))
	}
	fail := func(token string, fs ...outbox.Failure) {
		failed, dead, err := s.Fail(ctx, token, fs)
		log = append(log, fmt.Sprintf("fail %s: %d failed, %d dead, err %v", token, failed, dead, err))
	}
	mark := func(token string, rows ...int) {
		n, err := s.MarkPublished(ctx, token, t0, pick(rows...))
		log = append(log, fmt.Sprintf("mark %s: %d, err %v", token, n, err))
	}
	hold := func(token string, now, until time.Time, maxDeferral time.Duration) {
		dead, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: token, Now: now, Until: until, MaxDeferral: maxDeferral})
		log = append(log, fmt.Sprintf("hold %s: %d dead, err %v", token, dead, err))
	}

	claim("a", t0, 2)  // rows 0, 1: lowest ids first
	claim("b", t0, 10) // rows 2, 3, 4
	mark("b", 0)       // a's: nothing
	fail("a", outbox.Failure{ID: ids[0], RetryAt: at(5 * time.Second), Err: "boom"})
	deferral("a", t0, 1) // row 1 is free again, but waits behind row 0 (key k1)
	hold("b", t0, at(10*time.Second), time.Hour)
	claim("c", at(6*time.Second), 10)                            // nothing: orders is held, emails leased by b
	mark("b", 3)                                                 // 1
	claim("d", at(11*time.Second), 10)                           // the hold ended: row 0 alone, as the probe
	claim("e", at(12*time.Second), 10)                           // nothing: the probe holds orders
	hold("d", at(12*time.Second), at(30*time.Second), time.Hour) // the probe failed
	deferral("d", at(12*time.Second), 0)
	claim("f", at(31*time.Second), 10)                                             // row 0 again as the probe
	log = append(log, fmt.Sprintf("unhold e: err %v", s.Unhold(ctx, orders, "e"))) // not e's probe: the hold stays
	log = append(log, fmt.Sprintf("unhold f: err %v", s.Unhold(ctx, orders, "f")))
	mark("f", 0)
	log = append(log, fmt.Sprintf("release a: err %v", s.Release(ctx, "a"))) // a holds nothing
	claim("g", at(2*time.Minute), 10)                                        // rows 1, 2, 4: b's lease has passed
	hold("g", at(2*time.Hour), at(3*time.Hour), time.Hour)
	deferral("g", at(2*time.Hour), 1, 2)
	// Held since 2h, for 2h by now: rows 1 and 2, enqueued before the hold, are dead.
	hold("h", at(4*time.Hour), at(5*time.Hour), time.Hour)
	claim("i", at(5*time.Hour), 10) // row 4; orders' hold is dropped: nothing pending
	log = append(log, fmt.Sprintf("release i: err %v", s.Release(ctx, "i")))
	pending, oldest, err := s.Backlog(ctx)
	log = append(log, fmt.Sprintf("backlog: %d, %v, %v", pending, oldest, err))
	return log
}

// rowState prints what the Store contract says about a row, its id as its position.
func rowState(r outbox.Record, ids []int64) string {
	pos := -1
	for i, id := range ids {
		if id == r.ID {
			pos = i
		}
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("15:04:05.000000")
	}
	return fmt.Sprintf("[row %d %s %s %q visible %s attempts %d deferrals %d first %s %q lease %q %s probe %t settled %s]",
		pos, r.Destination, r.Status, r.Message.Value, ts(r.VisibleAfter), r.Attempts, r.Deferrals,
		ts(r.FirstDeferredAt), r.LastError, r.LeaseOwner, ts(r.LeaseUntil), r.Probe, ts(r.SettledAt))
}

// On both stores: a destination unusable for ten minutes (fake clock) is held, its
// rows uncharged and probed one at a time, the hold says why, and every row goes out
// in order once it works.
func TestUnusableDestinationOnBothStores(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		errForbidden := errors.New("403 ACCESS_REFUSED")
		var refusing atomic.Bool
		refusing.Store(true)
		var published []string
		pub := publisherFunc(func(_ context.Context, _ transport.Destination, msgs ...transport.Message) error {
			if refusing.Load() {
				return errForbidden
			}
			for _, m := range msgs {
				published = append(published, string(m.Value))
			}
			return nil
		})
		reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}}, registry.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		proc, err := outbox.NewProcessor(sc.store, reg, reg.Guard(pub, func(err error) breaker.Outcome {
			if errors.Is(err, errForbidden) {
				return breaker.Unusable
			}
			return breaker.Failure
		}), outbox.WithClock(clock), outbox.WithDeferralJitter(0), outbox.WithMaxAttempts(2))
		if err != nil {
			t.Fatal(err)
		}
		entries := make([]outbox.Entry, 10)
		for i := range entries {
			entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}}
		}
		ids := sc.enqueue(t, entries...)
		oc := sc.store.(outbox.OnCall)
		begin := clock.Now()
		for clock.Now().Sub(begin) < 10*time.Minute {
			if _, err := proc.ProcessPending(context.Background()); err != nil {
				t.Fatal(err)
			}
			hs, err := oc.Holds(context.Background())
			if err != nil || len(hs) != 1 || hs[0].Unusable != errForbidden.Error() {
				t.Fatalf("holds %+v, %v; want orders held as unusable", hs, err)
			}
			clock.Set(hs[0].Until)
		}
		for _, id := range ids {
			if r := sc.get(t, id); r.Status != outbox.StatusPending || r.Attempts != 0 {
				t.Fatalf("row %d: %s, %d attempts", id, r.Status, r.Attempts)
			}
		}
		refusing.Store(false)
		for range 4 {
			if _, err := proc.ProcessPending(context.Background()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Second)
		}
		if len(published) != len(ids) {
			t.Fatalf("published %v, want all %d", published, len(ids))
		}
		for i, v := range published {
			if v != strconv.Itoa(i) {
				t.Fatalf("published %v: out of order", published)
			}
		}
	})
}
