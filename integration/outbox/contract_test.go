package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// TestMemoryStoreMatchesPostgres runs one sequence of Store calls on the memory store
// and on the PostgreSQL store and requires the same answers and the same rows, so
// that unit tests on the memory store say something about production.
func TestMemoryStoreMatchesPostgres(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	mem := outbox.NewMemoryStore(clock)
	entries := []outbox.Entry{
		{Destination: orders, Message: transport.Message{Value: []byte("o1")}},
		{Destination: orders, Message: transport.Message{Value: []byte("o2")}},
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
// enqueue position, so that two stores' logs compare equal.
func storeScript(ctx context.Context, s outbox.Store, t0 time.Time, ids []int64) []string {
	var log []string
	claim := func(owner string, now time.Time, limit int) {
		recs, err := s.Claim(ctx, owner, now, limit, time.Minute)
		line := fmt.Sprintf("claim %s: err %v", owner, err)
		for _, r := range recs {
			line += " " + rowState(r, ids)
		}
		log = append(log, line)
	}
	deferral := func(d outbox.Deferral) {
		deferred, dead, err := s.Defer(ctx, d)
		log = append(log, fmt.Sprintf("defer %s: %d deferred, %d dead, err %v", d.Owner, deferred, dead, err))
	}
	fail := func(owner string, fs ...outbox.Failure) {
		log = append(log, fmt.Sprintf("fail %s: err %v", owner, s.Fail(ctx, owner, fs)))
	}
	mark := func(owner string, i int) {
		log = append(log, fmt.Sprintf("mark %s: err %v", owner, s.MarkPublished(ctx, owner, t0, ids[i:i+1])))
	}

	claim("a", t0, 3)  // rows 0, 1, 2
	claim("b", t0, 10) // row 3 only: the others are leased
	// Row 3 belongs to b: only row 0 is deferred.
	deferral(outbox.Deferral{Owner: "a", IDs: []int64{ids[0], ids[3]}, Now: t0, NotBefore: t0.Add(10 * time.Second),
		Jitter: 2 * time.Second, MaxDeferral: time.Hour})
	fail("a", outbox.Failure{ID: ids[1], RetryAt: t0.Add(5 * time.Second), Err: "boom"},
		outbox.Failure{ID: ids[2], RetryAt: t0, Dead: true, Err: "fatal"})
	mark("b", 3)
	mark("a", 3)                                                       // not a's: nothing
	claim("c", t0.Add(11*time.Second), 10)                             // row 1 only; row 0 is visible at t0+12s
	claim("d", t0.Add(12*time.Second), 10)                             // row 0
	fail("d", outbox.Failure{ID: ids[1], RetryAt: t0, Err: "not d's"}) // row 1 is c's: nothing
	// A second deferral of row 0 keeps its first_deferred_at; its visible_after t0+12s
	// is later than NotBefore.
	deferral(outbox.Deferral{Owner: "d", IDs: ids[:1], Now: t0.Add(12 * time.Second), NotBefore: t0,
		Jitter: time.Second, MaxDeferral: time.Hour})
	claim("e", t0.Add(2*time.Hour), 10) // rows 0 and 1: c's lease has passed
	// Row 0 was first deferred two hours ago: dead. Row 1 never was: deferred.
	deferral(outbox.Deferral{Owner: "e", IDs: ids[:2], Now: t0.Add(2 * time.Hour), NotBefore: t0.Add(2*time.Hour + time.Minute),
		MaxDeferral: time.Hour})
	claim("f", t0.Add(3*time.Hour), 10) // row 1
	log = append(log, fmt.Sprintf("release f: err %v", s.Release(ctx, "f")))
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
	return fmt.Sprintf("[row %d %s %s %q visible %s attempts %d deferrals %d first %s %q lease %q %s]",
		pos, r.Destination, r.Status, r.Message.Value, ts(r.VisibleAfter), r.Attempts, r.Deferrals,
		ts(r.FirstDeferredAt), r.LastError, r.LeaseOwner, ts(r.LeaseUntil))
}
