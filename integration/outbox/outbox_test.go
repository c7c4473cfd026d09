package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

// start is the fake clocks' reading: now, to the second, so rows look ordinary.
func start() time.Time { return time.Now().UTC().Truncate(time.Second) }

func TestEnqueueIsPartOfTheCallersTransaction(t *testing.T) {
	e := newEnv(t, fakeclock.New(start()))
	ctx := context.Background()
	entry := outbox.Entry{Destination: orders, Message: transport.Message{
		Value:   []byte("order 1"),
		Headers: []transport.Header{{Key: "trace", Value: []byte{0, 1, 2}}, {Key: "trace", Value: nil}},
	}}
	db, err := sql.Open("pgx", e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	for _, tc := range []struct {
		name  string
		begin func(t *testing.T) (tx postgres.Tx, commit, rollback func() error)
	}{
		{"pgx", func(t *testing.T) (postgres.Tx, func() error, func() error) {
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return postgres.Pgx(tx), func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
		}},
		{"database/sql", func(t *testing.T) (postgres.Tx, func() error, func() error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return postgres.SQL(tx), tx.Commit, tx.Rollback
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.countRows(t, "true")

			tx, _, rollback := tc.begin(t)
			if _, err := e.store.Enqueue(ctx, tx, entry); err != nil {
				t.Fatal(err)
			}
			if n, _, _ := e.store.Backlog(ctx); n != 0 {
				t.Fatalf("an uncommitted row is visible: backlog %d", n)
			}
			if err := rollback(); err != nil {
				t.Fatal(err)
			}
			if n := e.countRows(t, "true"); n != before {
				t.Fatalf("%d rows after a rolled-back enqueue, want %d", n, before)
			}

			tx, commit, _ := tc.begin(t)
			ids, err := e.store.Enqueue(ctx, tx, entry, entry)
			if err != nil {
				t.Fatal(err)
			}
			if err := commit(); err != nil {
				t.Fatal(err)
			}
			if len(ids) != 2 || ids[0] >= ids[1] {
				t.Fatalf("ids %v", ids)
			}
			r := e.get(t, ids[0])
			if r.Status != outbox.StatusPending || r.Destination != orders || r.Message.Key != nil ||
				string(r.Message.Value) != "order 1" || !slices.EqualFunc(r.Message.Headers, entry.Message.Headers, equalHeader) ||
				!r.CreatedAt.Equal(e.clock.Now()) || !r.VisibleAfter.Equal(r.CreatedAt) {
				t.Errorf("row read back %+v; want what was enqueued, pending, visible now", r)
			}
			rows, err := e.store.Claim(ctx, outbox.ClaimRequest{Token: "reader", Now: e.clock.Now(), Limit: 10, Lease: time.Minute})
			if err != nil || len(rows) != 2 {
				t.Fatalf("Claim = %d rows, %v", len(rows), err)
			}
			if n, err := e.store.MarkPublished(ctx, "reader", e.clock.Now(), ids); err != nil || n != 2 {
				t.Fatalf("MarkPublished = %d, %v; want 2", n, err)
			}
		})
	}
}

func equalHeader(a, b transport.Header) bool {
	return a.Key == b.Key && string(a.Value) == string(b.Value)
}

func TestEnqueueRejectsAnInvalidDestination(t *testing.T) {
	e := newEnv(t, fakeclock.New(start()))
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		_, err := e.store.Enqueue(ctx, postgres.Pgx(tx), outbox.Entry{Destination: transport.Destination{Broker: "kafka"}})
		return err
	})
	if !errors.Is(err, transport.ErrInvalidDestination) {
		t.Fatalf("Enqueue = %v, want ErrInvalidDestination", err)
	}
}

func TestCircuitOpenHoldsTheDestinationInTwoStatements(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	reg, counted, pub := e.guarded(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}, e.brokers)
	proc := e.processor(t, reg, pub, outbox.WithRandom(func() float64 { return 0.5 }), outbox.WithDeferralJitter(10*time.Second))
	deferredIDs := e.enqueue(t, orders, 40)
	publishedIDs := e.enqueue(t, emails, 10)
	notBefore := clock.Now().Add(time.Minute)
	c, _ := reg.Circuit(orders)
	c.(*breaker.Breaker).ForceOpen(notBefore)
	now := clock.Now()
	e.stmts.take()

	rep, err := proc.ProcessPending(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	if counted.callsTo(orders) != 0 {
		t.Fatalf("the publisher was called for %s while its circuit was open", orders)
	}
	if got := rep.ByDestination[orders]; got != (outbox.Counts{Deferred: 40}) {
		t.Errorf("%s: %+v, want 40 deferred", orders, got)
	}
	if got := rep.ByDestination[emails]; got != (outbox.Counts{Published: 10}) {
		t.Errorf("%s: %+v, want 10 published", emails, got)
	}
	// claim; the hold and one deferral for the 40 rows; one mark for the 10 published
	if sqls := e.stmts.take(); len(sqls) != 4 {
		t.Errorf("%d statements for a batch of two destinations, want 4:\n%s", len(sqls), strings.Join(sqls, "\n---\n"))
	}
	if until := e.heldUntil(t, orders); !until.Equal(notBefore.Add(5 * time.Second)) {
		t.Errorf("%s held until %v, want %v", orders, until, notBefore.Add(5*time.Second))
	}
	for _, id := range deferredIDs {
		r := e.get(t, id)
		if r.Status != outbox.StatusPending || r.Attempts != 0 || r.Deferrals != 1 || !r.FirstDeferredAt.Equal(now) ||
			!r.VisibleAfter.Equal(now) || r.LeaseOwner != "" || !r.LeaseUntil.IsZero() {
			t.Fatalf("row %d after deferral: %+v; want pending, 0 attempts, 1 deferral, first deferred %v, visible_after untouched, released",
				id, r, now)
		}
	}
	got := consumeIDs(t, e.brokers, len(publishedIDs), "emails", "orders")
	for _, id := range publishedIDs {
		if got[id] != 1 || e.get(t, id).Status != outbox.StatusPublished {
			t.Errorf("row %d delivered %d times, status %s", id, got[id], e.get(t, id).Status)
		}
	}
	if len(got) != len(publishedIDs) {
		t.Errorf("%d rows on Kafka, want only the %d of the healthy destination", len(got), len(publishedIDs))
	}
}

// An unreachable broker is an outage: the destination is held, the rows keep their
// attempts.
func TestBrokerUnreachableHoldsTheDestination(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	reg, _, pub := e.guarded(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, []string{deadAddress(t)})
	proc := e.processor(t, reg, pub, outbox.WithRandom(func() float64 { return 0 }))
	ids := e.enqueue(t, orders, 3)

	rep, err := proc.ProcessPending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.ByDestination[orders]; got != (outbox.Counts{Deferred: 3}) {
		t.Errorf("report %+v, want 3 deferred", got)
	}
	for _, id := range ids {
		r := e.get(t, id)
		if r.Status != outbox.StatusPending || r.Attempts != 0 || r.Deferrals != 1 || r.LeaseOwner != "" {
			t.Errorf("row %d: %+v; want pending, no attempt, 1 deferral, released", id, r)
		}
	}
	// The circuit is still closed (1 failure of 5): held for the rejected delay.
	if until := e.heldUntil(t, orders); !until.Equal(clock.Now().Add(outbox.DefaultRejectedDelay)) {
		t.Errorf("held until %v, want %v", until, clock.Now().Add(outbox.DefaultRejectedDelay))
	}
	if s := snapshot(t, reg, orders); s.Failures != 1 {
		t.Errorf("circuit failures %d, want the failed publish counted once", s.Failures)
	}
}

func snapshot(t *testing.T, reg interface {
	Circuit(transport.Destination) (breaker.Circuit, error)
}, d transport.Destination) breaker.Snapshot {
	t.Helper()
	c, err := reg.Circuit(d)
	if err != nil {
		t.Fatal(err)
	}
	return c.Snapshot()
}

// An outage never consumes attempts; a destination held past MaxCircuitDeferral has
// its rows made dead, not before, and the broker sees one probe per break.
func TestDeferralNeverConsumesAttemptsAndExhausts(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	// One failure opens the circuit for 10 minutes; the broker is down.
	reg, counted, pub := e.guarded(t, breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Minute}, []string{deadAddress(t)})
	proc := e.processor(t, reg, pub, outbox.WithMaxCircuitDeferral(time.Hour), outbox.WithDeferralJitter(0))
	id := e.enqueue(t, orders, 1)[0]
	t0 := clock.Now()

	dead := 0
	for clock.Now().Sub(t0) < 90*time.Minute {
		rep, err := proc.ProcessPending(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		dead += rep.ByDestination[orders].Dead
		r := e.get(t, id)
		if r.Attempts != 0 {
			t.Fatalf("an outage consumed an attempt: %+v", r)
		}
		if r.Status == outbox.StatusDead && clock.Now().Sub(t0) <= time.Hour {
			t.Fatalf("dead %v into the outage, within MaxCircuitDeferral", clock.Now().Sub(t0))
		}
		clock.Advance(time.Minute)
	}
	r := e.get(t, id)
	if r.Status != outbox.StatusDead || r.LastError != outbox.ReasonDeferralExhausted || dead != 1 {
		t.Fatalf("row %+v, %d reported dead; want dead with %q", r, dead, outbox.ReasonDeferralExhausted)
	}
	if tries := counted.callsTo(orders); tries > 8 {
		t.Errorf("%d broker tries in 70 minutes; want the first and one probe per 10-minute break", tries)
	}
}

func TestAttemptsExhaustionMakesTheRowDead(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	reg, _, pub := e.guarded(t, breaker.DisabledPolicy(), []string{deadAddress(t)}) // a circuit that never opens
	// As if every error were the message's own (too large, say): attempts are spent.
	neutral := func(error) breaker.Outcome { return breaker.Neutral }
	proc := e.processor(t, reg, pub, outbox.WithMaxAttempts(3), outbox.WithClassifier(neutral))
	id := e.enqueue(t, orders, 1)[0]

	var counts []outbox.Counts
	for range 3 {
		rep, err := proc.ProcessPending(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, rep.ByDestination[orders])
		clock.Advance(time.Hour)
	}
	want := []outbox.Counts{{Failed: 1}, {Failed: 1}, {Dead: 1}}
	if !slices.Equal(counts, want) {
		t.Errorf("batches %+v, want %+v", counts, want)
	}
	if r := e.get(t, id); r.Status != outbox.StatusDead || r.Attempts != 3 || r.Deferrals != 0 ||
		!strings.HasPrefix(r.LastError, outbox.ReasonAttemptsExhausted+": ") {
		t.Errorf("row %+v; want dead after 3 attempts with the broker's error", r)
	}
}

func TestUnknownStatusIsAnErrorNamingTheRow(t *testing.T) {
	e := newEnv(t, fakeclock.New(start()))
	id := e.enqueue(t, orders, 1)[0]
	// As if a newer version had written a status this one does not know.
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, "ALTER TABLE "+postgres.Table+" DROP CONSTRAINT brokerguard_outbox_status_check"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, "UPDATE "+postgres.Table+" SET status = 'archived' WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	_, err := e.store.Get(ctx, id)
	var use *storekit.UnknownStatusError
	if !errors.As(err, &use) || use.ID != id || use.Status != "archived" {
		t.Fatalf("Get = %v; want an UnknownStatusError naming row %d", err, id)
	}
	if n, _, _ := e.store.Backlog(ctx); n != 0 {
		t.Errorf("backlog counts a row of unknown status")
	}
}

func TestInvalidDestinationInTheTableMakesTheRowDead(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	reg, counted, pub := e.guarded(t, breaker.DisabledPolicy(), e.brokers)
	proc := e.processor(t, reg, pub)
	var id int64
	err := e.pool.QueryRow(context.Background(), "INSERT INTO "+postgres.Table+
		" (destination, payload, created_at, visible_after) VALUES ('Kafka:orders', 'x', $1, $1) RETURNING id", clock.Now()).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	good := e.enqueue(t, orders, 1)[0]

	rep, err := proc.ProcessPending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total() != (outbox.Counts{Published: 1, Dead: 1}) {
		t.Errorf("report %+v, want the good row published and the bad one dead", rep.Total())
	}
	r := e.get(t, id)
	if r.Status != outbox.StatusDead || !strings.Contains(r.LastError, "invalid destination") {
		t.Errorf("row %+v; want dead naming the invalid destination", r)
	}
	if e.get(t, good).Status != outbox.StatusPublished || counted.callsTo(orders) != 1 {
		t.Errorf("the valid row was not published")
	}
}

func TestBacklog(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	ctx := context.Background()
	if n, age, err := e.store.Backlog(ctx); n != 0 || age != 0 || err != nil {
		t.Fatalf("empty Backlog = %d, %v, %v", n, age, err)
	}
	ids := e.enqueue(t, orders, 2)
	clock.Advance(time.Minute)
	e.enqueue(t, orders, 1)
	clock.Advance(time.Minute)
	if n, age, _ := e.store.Backlog(ctx); n != 3 || age != 2*time.Minute {
		t.Errorf("Backlog = %d, %v; want 3 rows, oldest 2m", n, age)
	}
	if _, err := e.store.Claim(ctx, outbox.ClaimRequest{Token: "me", Now: clock.Now(), Limit: 2, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.MarkPublished(ctx, "me", clock.Now(), ids); err != nil {
		t.Fatal(err)
	}
	if n, age, _ := e.store.Backlog(ctx); n != 1 || age != time.Minute {
		t.Errorf("Backlog = %d, %v; want 1 row, oldest 1m", n, age)
	}
}

func TestMigrateTwiceIsHarmless(t *testing.T) {
	e := newEnv(t, fakeclock.New(start()))
	e.enqueue(t, orders, 1)
	if err := postgres.Migrate(context.Background(), e.pool); err != nil {
		t.Fatal(err)
	}
	if n := e.countRows(t, "true"); n != 1 {
		t.Errorf("%d rows after a second Migrate, want 1", n)
	}
}

func TestRunStopLeavesNoRowLeased(t *testing.T) {
	e := newEnv(t, breaker.Clock(nil))
	reg, _, pub := e.guarded(t, breaker.DisabledPolicy(), e.brokers)
	started := make(chan struct{})
	blocking := publisherFunc(func(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
		if d == emails {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}
		return pub.Publish(ctx, d, msgs...)
	})
	proc := e.processor(t, reg, blocking, outbox.WithBatchSize(1000), outbox.WithClassifier(outageOnError))
	e.enqueue(t, orders, 20)
	e.enqueue(t, emails, 20)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	<-started
	if n := e.countRows(t, "lease_owner LIKE $1", proc.Owner()+"/%"); n != 20 {
		t.Fatalf("%d rows leased while emails publish, want its 20", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := e.countRows(t, "lease_owner IS NOT NULL OR lease_until IS NOT NULL"); n != 0 {
		t.Errorf("%d rows still leased after Run stopped", n)
	}
	if n := e.countRows(t, "status = 'published'"); n != 20 {
		t.Errorf("%d rows published, want the 20 of orders", n)
	}
	if n := e.countRows(t, "status = 'pending' AND attempts = 0"); n != 20 {
		t.Errorf("%d rows pending untouched, want the 20 of emails", n)
	}
}

type publisherFunc func(ctx context.Context, d transport.Destination, msgs ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}
