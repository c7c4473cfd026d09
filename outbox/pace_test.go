package outbox_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// limitedPolicy is the recommended set-up: a consecutive circuit with the adaptive
// limit on.
var limitedPolicy = registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 10 * time.Second}, Admission: admission.DefaultPolicy()}

// An outage of 5 s that only the outbox sees opens the circuit: its failures reach
// the circuit as they happen instead of one per WithRejectedDelay hold.
func TestOutageSeenOnlyByTheOutboxOpensTheCircuit(t *testing.T) {
	f := newFixture(t, limitedPolicy, outbox.WithDeferralJitter(time.Second))
	end := t0.Add(5 * time.Second)
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error {
		if f.clock.Now().Before(end) {
			return errBroker
		}
		return nil
	}
	ids := f.enqueue(t, orders, 50)
	opened := false
	for f.clock.Now().Before(end) {
		rep := f.process(t)
		if s := f.reg.Snapshots()[orders]; s.State == breaker.Open {
			opened = true
			break
		}
		step := rep.Pause
		if step == 0 {
			step = 10 * time.Millisecond // Run would claim again at once; the fake clock must move
		}
		f.clock.Advance(step)
	}
	if !opened {
		t.Fatalf("5s outage seen only by the outbox: circuit %+v, want open", f.reg.Snapshots()[orders])
	}
	for _, id := range ids {
		if r := f.get(t, id); r.Attempts != 0 || r.Status != outbox.StatusPending {
			t.Fatalf("row %+v: want pending with no attempt spent on the outage", r)
		}
	}
}

// The control: without the limit a closed circuit's outage failure holds the
// destination for the rejected delay (and jitter), so the same outage leaves the
// circuit closed.
func TestOutageSeenOnlyByTheOutboxWithoutALimitHoldsPerFailure(t *testing.T) {
	p := limitedPolicy
	p.Admission.Limit = admission.LimitPolicy{}
	f := newFixture(t, p, outbox.WithDeferralJitter(time.Second))
	end := t0.Add(5 * time.Second)
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error {
		if f.clock.Now().Before(end) {
			return errBroker
		}
		return nil
	}
	f.enqueue(t, orders, 50)
	for f.clock.Now().Before(end) {
		f.process(t)
		f.clock.Advance(10 * time.Millisecond)
	}
	if s := f.reg.Snapshots()[orders]; s.State != breaker.Closed || f.inner.callsTo(orders) > 4 {
		t.Fatalf("without a limit: %d publishes, circuit %v; want at most 4 (one per hold) and closed", f.inner.callsTo(orders), s.State)
	}
}

// A destination whose limit leaves little room for bulk work gets batches of that
// size, in order, with no attempt or deferral charged to the rows left for later.
func TestBatchesArePacedByTheBulkHeadroom(t *testing.T) {
	p := limitedPolicy
	p.Admission.Limit = admission.LimitPolicy{Max: 20, BulkShare: 0.5}
	f := newFixture(t, p)
	var sizes []int
	var got []string
	f.inner.fn = func(ctx context.Context, _ transport.Destination, msgs []transport.Message) error {
		if admission.PriorityOf(ctx) != admission.Bulk {
			t.Errorf("outbox publish not marked bulk")
		}
		sizes = append(sizes, len(msgs))
		for _, m := range msgs {
			got = append(got, string(m.Value))
		}
		return nil
	}
	ids := f.enqueue(t, orders, 35)
	for range 10 {
		if rep := f.process(t); rep.Claimed == 0 {
			break
		}
	}
	if len(sizes) != 4 || sizes[0] != 10 || sizes[3] != 5 {
		t.Fatalf("batch sizes %v, want 10,10,10,5 (the bulk share of a limit of 20)", sizes)
	}
	for i, id := range ids {
		r := f.get(t, id)
		if r.Status != outbox.StatusPublished || r.Attempts != 0 || r.Deferrals != 0 {
			t.Fatalf("row %+v: want published, nothing charged", r)
		}
		if want := orders.Name + "-" + string(rune('a'+i%26)); got[i] != want {
			t.Fatalf("message %d is %q, want %q: order lost", i, got[i], want)
		}
	}
}

// A publish the limit refuses is not an outage: nothing is held or charged, and the
// claim asks Run for a short pause.
func TestLimitRefusalPausesWithoutHolding(t *testing.T) {
	p := limitedPolicy
	p.Admission.Limit = admission.LimitPolicy{Max: 4}
	f := newFixture(t, p)
	// Online calls take the whole limit.
	var online []registry.Permit
	for range 4 {
		pm, err := f.reg.Acquire(context.Background(), orders)
		if err != nil {
			t.Fatal(err)
		}
		online = append(online, pm)
	}
	ids := f.enqueue(t, orders, 3)
	rep := f.process(t)
	if rep.Pause <= 0 || rep.Pause > time.Second || f.inner.callsTo(orders) != 0 {
		t.Fatalf("report %+v after %d publishes: want a short pause and nothing published", rep, f.inner.callsTo(orders))
	}
	if until, held := f.store.HeldUntil(orders); held {
		t.Fatalf("destination held until %v by a limit refusal", until)
	}
	for _, id := range ids {
		if r := f.get(t, id); r.Attempts != 0 || r.Deferrals != 0 || r.LeaseOwner != "" {
			t.Fatalf("row %+v: want released, nothing charged", r)
		}
	}
	for _, pm := range online {
		f.reg.Complete(orders, pm, breaker.Success)
	}
	f.process(t)
	if n := f.inner.callsTo(orders); n != 1 {
		t.Fatalf("after online calls ended: %d publishes, want 1", n)
	}
	if _, err := f.reg.AcquireN(context.Background(), orders, 4); errors.Is(err, admission.ErrOverLimit) {
		t.Fatal("limit still taken after the outbox's publish completed")
	}
}

// A relay paced to nothing (another relay's batch holds the whole bulk budget) waits
// for that batch to end, not for its pause: it publishes the moment the bulk work
// gives its messages back. The pause and the poll interval here are an hour.
func TestPacedRunWakesWhenBulkHeadroomReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := limitedPolicy
		p.Admission.Limit = admission.LimitPolicy{Max: 20, BulkShare: 0.5, Window: time.Hour}
		reg, err := registry.New(p)
		if err != nil {
			t.Fatal(err)
		}
		pub := &fakePublisher{}
		store := memory.New(nil)
		proc, err := outbox.NewProcessor(store, reg, reg.Guard(pub, nil), outbox.WithClassifier(outageOnError),
			outbox.WithPollInterval(time.Hour), outbox.WithRejectedDelay(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		other, err := reg.AcquireN(admission.WithPriority(context.Background(), admission.Bulk), orders, 10)
		if err != nil {
			t.Fatal(err)
		}
		enqueueN(t, store, 5)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- proc.Run(ctx) }()
		synctest.Wait()
		if n := published(store); n != 0 {
			t.Fatalf("%d rows published while another batch held the bulk budget", n)
		}
		reg.Complete(orders, other, breaker.Success)
		synctest.Wait()
		if n := published(store); n != 5 || time.Since(start) != 0 {
			t.Fatalf("%d of 5 rows published %v after the other batch ended, want all at once", n, time.Since(start))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v after cancel", err)
		}
	})
}
