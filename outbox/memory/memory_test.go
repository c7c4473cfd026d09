package memory_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

var (
	t0     = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	orders = transport.Destination{Broker: "kafka", Name: "orders"}
	emails = transport.Destination{Broker: "kafka", Name: "emails"}
)

// obWrites tracks a memory store's Writes between steps.
type obWrites struct {
	s          *memory.Store
	rows, hold int64
}

// obTrack starts counting s's writes from now.
func obTrack(s *memory.Store) *obWrites {
	w := &obWrites{s: s}
	w.rows, w.hold = s.Writes()
	return w
}

// step checks that the writes since the last step are rows row changes and holds
// hold writes.
func (w *obWrites) step(t *testing.T, what string, rows, holds int64) {
	t.Helper()
	r, h := w.s.Writes()
	if r-w.rows != rows || h-w.hold != holds {
		t.Errorf("%s: %d row writes and %d hold writes, want %d and %d", what, r-w.rows, h-w.hold, rows, holds)
	}
	w.rows, w.hold = r, h
}

// Writes counts every row a claim leases or a write-back changes, and every hold
// created, changed or dropped, as a PostgreSQL store would write them; rows and
// holds a call leaves alone cost nothing.
func TestMemoryStoreWritesCountEveryChange(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New(t0)
	s := memory.New(clock)
	w := obTrack(s)
	ids, err := s.Enqueue(ctx,
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("a")}},
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("b")}},
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("c")}},
	)
	if err != nil {
		t.Fatal(err)
	}
	w.step(t, "enqueue", 0, 0)

	recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: "a", Now: t0, Limit: 10, Lease: time.Minute, ProbeLimit: 1})
	if err != nil || len(recs) != 3 {
		t.Fatalf("claim = %d rows, %v", len(recs), err)
	}
	w.step(t, "claim of three rows", 3, 0)

	if _, err := s.MarkPublished(ctx, "a", t0, ids[:1]); err != nil {
		t.Fatal(err)
	}
	w.step(t, "one row published", 1, 0)
	if _, err := s.MarkPublished(ctx, "other", t0, ids[1:2]); err != nil {
		t.Fatal(err)
	}
	w.step(t, "a publish by a token that holds nothing", 0, 0)
	if _, err := s.Defer(ctx, outbox.Deferral{Token: "a", IDs: ids[1:2], Now: t0}); err != nil {
		t.Fatal(err)
	}
	w.step(t, "one row deferred", 1, 0)
	if _, _, err := s.Fail(ctx, "a", []outbox.Failure{{ID: ids[2], RetryAt: t0, Err: "x"}}); err != nil {
		t.Fatal(err)
	}
	w.step(t, "one row failed", 1, 0)

	if _, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: "a", Now: t0, Until: t0.Add(time.Minute), MaxDeferral: time.Hour}); err != nil {
		t.Fatal(err)
	}
	w.step(t, "a new hold", 0, 1)
	if _, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: "b", Now: t0, Until: t0.Add(2 * time.Minute), MaxDeferral: time.Hour}); err != nil {
		t.Fatal(err)
	}
	w.step(t, "a hold extended", 0, 1)

	clock.Advance(3 * time.Minute)
	recs, err = s.Claim(ctx, outbox.ClaimRequest{Token: "p", Now: clock.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
	if err != nil || len(recs) != 1 || !recs[0].Probe {
		t.Fatalf("probe claim = %+v, %v", recs, err)
	}
	w.step(t, "a probe claimed", 1, 1)
	if err := s.Unhold(ctx, orders, "a"); err != nil {
		t.Fatal(err)
	}
	w.step(t, "an unhold by a token that is not the probe's", 0, 0)
	if err := s.Unhold(ctx, orders, "p"); err != nil {
		t.Fatal(err)
	}
	w.step(t, "the probe's unhold", 0, 1)
	if err := s.Release(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	w.step(t, "the probe released", 1, 0)

	// A hold that has ended on a destination with no pending row is dropped by the
	// next claim.
	if _, err := s.Hold(ctx, outbox.Hold{Destination: emails, Token: "e", Now: clock.Now(), Until: clock.Now(), MaxDeferral: time.Hour}); err != nil {
		t.Fatal(err)
	}
	w.step(t, "a hold of a destination without rows", 0, 1)
	clock.Advance(time.Second)
	recs, err = s.Claim(ctx, outbox.ClaimRequest{Token: "q", Now: clock.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
	if err != nil || len(recs) != 2 {
		t.Fatalf("claim = %d rows, %v", len(recs), err)
	}
	w.step(t, "a claim that drops an ended hold", 2, 1)
	if _, held := s.HeldUntil(emails); held {
		t.Error("the ended hold of a destination without rows was kept")
	}
}

// A hold whose outage budget is spent makes the rows dead and gives back their
// lease: a dead row is leased by nobody, and its change is a row write.
func TestMemoryStoreHoldMakesRowsDeadAndReleasesThem(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New(t0)
	s := memory.New(clock)
	ids, err := s.Enqueue(ctx, outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: "a", Now: t0, Until: t0.Add(time.Minute), MaxDeferral: time.Hour}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: "p", Now: clock.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
	if err != nil || len(recs) != 1 {
		t.Fatalf("probe claim = %d rows, %v", len(recs), err)
	}
	w := obTrack(s)
	dead, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: "p", Now: clock.Now(), Until: clock.Now().Add(time.Minute), MaxDeferral: time.Hour})
	if err != nil || dead != 1 {
		t.Fatalf("Hold = %d dead, %v; want 1", dead, err)
	}
	w.step(t, "a hold that makes one row dead", 1, 1)
	r, _ := s.Get(ids[0])
	if r.Status != outbox.StatusDead || r.LeaseOwner != "" || !r.LeaseUntil.IsZero() {
		t.Errorf("row after its budget ran out: status %s, lease %q until %v; want dead and unleased", r.Status, r.LeaseOwner, r.LeaseUntil)
	}
}

// A Hold by a claim that does not hold the probe only lengthens the hold: a shorter
// one leaves it as it is.
func TestMemoryStoreHoldByAnotherClaimOnlyLengthens(t *testing.T) {
	ctx := context.Background()
	s := memory.New(fakeclock.New(t0))
	hold := func(token string, until time.Duration) {
		t.Helper()
		if _, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: token, Now: t0, Until: t0.Add(until), MaxDeferral: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	hold("a", 10*time.Minute)
	hold("b", 5*time.Minute)
	if until, _ := s.HeldUntil(orders); !until.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("a shorter hold by another claim moved the end to %v", until.Sub(t0))
	}
	hold("c", 20*time.Minute)
	if until, _ := s.HeldUntil(orders); !until.Equal(t0.Add(20 * time.Minute)) {
		t.Errorf("a longer hold by another claim left the end at %v", until.Sub(t0))
	}
}

func TestMemoryStoreGetOfAMissingRow(t *testing.T) {
	s := memory.New(nil)
	if _, err := s.Enqueue(context.Background(), outbox.Entry{Destination: orders}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{0, 2, -1} {
		if r, ok := s.Get(id); ok {
			t.Errorf("Get(%d) = %+v, true; want no row", id, r)
		}
	}
	if _, ok := s.Get(1); !ok {
		t.Error("Get(1) found no row")
	}
}

// BacklogByDestination counts each destination's pending rows, in the order of its
// oldest one, with that row's age on the store's clock; settled rows and
// destinations with none pending are left out.
func TestMemoryStoreBacklogByDestination(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New(t0)
	s := memory.New(clock)
	add := func(d transport.Destination) int64 {
		t.Helper()
		ids, err := s.Enqueue(ctx, outbox.Entry{Destination: d, Message: transport.Message{Value: []byte("v")}})
		if err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	invoices := transport.Destination{Broker: "kafka", Name: "invoices"}
	done := add(invoices)
	add(orders)
	add(orders)
	clock.Advance(time.Minute)
	add(emails)
	add(orders)
	clock.Advance(time.Minute)
	if _, err := s.Claim(ctx, outbox.ClaimRequest{Token: "a", Now: clock.Now(), Limit: 1, Lease: time.Minute, ProbeLimit: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkPublished(ctx, "a", clock.Now(), []int64{done}); err != nil {
		t.Fatal(err)
	}
	got, err := s.BacklogByDestination(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []outbox.DestinationBacklog{
		{Destination: orders, Pending: 3, Oldest: 2 * time.Minute},
		{Destination: emails, Pending: 1, Oldest: time.Minute},
	}
	if !slices.Equal(got, want) {
		t.Errorf("BacklogByDestination = %+v, want %+v", got, want)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := s.BacklogByDestination(cctx); !errors.Is(err, context.Canceled) || got != nil {
		t.Errorf("BacklogByDestination(cancelled) = %v, %v", got, err)
	}
}

// A store without a clock measures ages on the system clock.
func TestMemoryStoreBacklogByDestinationWithoutAClock(t *testing.T) {
	s := memory.New(nil)
	before := time.Now()
	if _, err := s.Enqueue(context.Background(), outbox.Entry{Destination: orders}); err != nil {
		t.Fatal(err)
	}
	got, err := s.BacklogByDestination(context.Background())
	if err != nil || len(got) != 1 || got[0].Pending != 1 {
		t.Fatalf("BacklogByDestination = %+v, %v", got, err)
	}
	if age := got[0].Oldest; age < 0 || age > time.Since(before) {
		t.Errorf("age %v, want between 0 and %v", age, time.Since(before))
	}
}

// Dead summaries carry the record without its payload, and the payload's length.
func TestDeadSummariesLeaveOutThePayload(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New(t0)
	s := memory.New(clock)
	ids, err := s.Enqueue(ctx, outbox.Entry{Destination: orders, Message: transport.Message{Key: []byte("k"), Value: []byte("12345")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, outbox.ClaimRequest{Token: "a", Now: t0, Limit: 1, Lease: time.Minute, ProbeLimit: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Fail(ctx, "a", []outbox.Failure{{ID: ids[0], RetryAt: t0, Dead: true, Err: "bad"}}); err != nil {
		t.Fatal(err)
	}
	rows, err := s.DeadRows(ctx, outbox.DeadFilter{}, outbox.Page{})
	if err != nil || len(rows) != 1 {
		t.Fatalf("DeadRows = %d rows, %v", len(rows), err)
	}
	fromStore, err := s.DeadSummaries(ctx, outbox.DeadFilter{}, outbox.Page{})
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]outbox.DeadSummary{"DeadSummaries": fromStore, "Summarize": storekit.Summarize(rows)} {
		if len(got) != 1 {
			t.Errorf("%s = %d summaries, want 1", name, len(got))
			continue
		}
		g := got[0]
		if g.ValueBytes != 5 || g.Message.Value != nil || g.ID != ids[0] || g.LastError != "bad" || string(g.Message.Key) != "k" {
			t.Errorf("%s = %+v; want row %d, key k, error bad, 5 value bytes and no value", name, g, ids[0])
		}
	}
	if string(rows[0].Message.Value) != "12345" {
		t.Errorf("Summarize changed the rows it was given: value %q", rows[0].Message.Value)
	}
}
