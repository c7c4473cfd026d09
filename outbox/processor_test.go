package outbox_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

func TestPublishesEachDestinationInOneCallInEnqueueOrder(t *testing.T) {
	hooks := &recordingHooks{}
	f := newFixture(t, policy, outbox.WithHooks(hooks), outbox.WithIDHeader("outbox-id"))
	a := f.enqueue(t, orders, 3)
	b := f.enqueue(t, emails, 2)

	rep := f.process(t)

	if rep.Claimed != 5 {
		t.Fatalf("Claimed = %d, want 5", rep.Claimed)
	}
	want := map[transport.Destination]outbox.Counts{orders: {Published: 3}, emails: {Published: 2}}
	for d, c := range want {
		if rep.ByDestination[d] != c {
			t.Errorf("%s: %+v, want %+v", d, rep.ByDestination[d], c)
		}
	}
	if len(f.inner.calls) != 2 {
		t.Fatalf("%d publish calls, want one per destination: %+v", len(f.inner.calls), f.inner.calls)
	}
	for i, call := range f.inner.calls {
		wantIDs := [][]int64{a, b}[i]
		if len(call.Msgs) != len(wantIDs) {
			t.Fatalf("call %d to %s has %d messages, want %d", i, call.Dest, len(call.Msgs), len(wantIDs))
		}
		for j, m := range call.Msgs {
			h := m.Headers[len(m.Headers)-1]
			if h.Key != "outbox-id" || string(h.Value) != strconv.FormatInt(wantIDs[j], 10) {
				t.Errorf("call %d message %d: id header %q=%q, want row %d", i, j, h.Key, h.Value, wantIDs[j])
			}
		}
	}
	for _, id := range append(a, b...) {
		if r := f.get(t, id); r.Status != outbox.StatusPublished || r.LeaseOwner != "" {
			t.Errorf("row %d: status %s, lease %q; want published and released", id, r.Status, r.LeaseOwner)
		}
	}
	wantHooks := []hookCall{{Dest: orders, Published: 3}, {Dest: emails, Published: 2}}
	if len(hooks.calls) != 2 || hooks.calls[0] != wantHooks[0] || hooks.calls[1] != wantHooks[1] {
		t.Errorf("hooks = %+v, want %+v", hooks.calls, wantHooks)
	}
	if n, _, _ := f.store.Backlog(context.Background()); n != 0 {
		t.Errorf("backlog %d after publishing everything", n)
	}
}

func TestOpenCircuitHoldsTheDestinationWithoutChargingItsRows(t *testing.T) {
	f := newFixture(t, policy)
	a := f.enqueue(t, orders, 2)
	b := f.enqueue(t, emails, 1)
	notBefore := t0.Add(time.Minute)
	f.forceOpen(t, orders, notBefore)

	rep := f.process(t)

	if f.inner.callsTo(orders) != 0 {
		t.Fatalf("the publisher was called for %s whose circuit is open", orders)
	}
	if got := rep.ByDestination[orders]; got != (outbox.Counts{Deferred: 2}) {
		t.Errorf("%s: %+v, want 2 deferred", orders, got)
	}
	if got := rep.ByDestination[emails]; got != (outbox.Counts{Published: 1}) {
		t.Errorf("%s: %+v, want 1 published (no head-of-line blocking)", emails, got)
	}
	wantHeld := notBefore.Add(5 * time.Second) // jitter: 0.5 of 10s
	if until, ok := f.store.HeldUntil(orders); !ok || !until.Equal(wantHeld) {
		t.Errorf("%s held until %v (%t), want %v", orders, until, ok, wantHeld)
	}
	for _, id := range a {
		r := f.get(t, id)
		if r.Status != outbox.StatusPending || r.Attempts != 0 || r.Deferrals != 1 ||
			!r.FirstDeferredAt.Equal(t0) || !r.VisibleAfter.Equal(t0) || r.LeaseOwner != "" {
			t.Errorf("row %d after deferral: %+v; want pending, attempts 0, deferrals 1, first deferred %v, visible_after untouched, released",
				id, r, t0)
		}
	}

	// Held: nothing is claimed, nothing is written, however often the dispatcher looks.
	rows, holds := f.store.Writes()
	for range 10 {
		f.clock.Advance(5 * time.Second)
		if rep := f.process(t); rep.Claimed != 0 {
			t.Fatalf("claimed %d rows of a held destination", rep.Claimed)
		}
	}
	if r2, h2 := f.store.Writes(); r2 != rows || h2 != holds {
		t.Errorf("polling a held destination wrote %d rows and %d holds", r2-rows, h2-holds)
	}

	// The hold ends while the circuit is still open: one row is claimed as the probe
	// and given back; the destination is held again.
	f.clock.Set(wantHeld)
	f.forceOpen(t, orders, wantHeld.Add(time.Hour))
	rep = f.process(t)
	if rep.Claimed != 1 || rep.ByDestination[orders] != (outbox.Counts{Deferred: 1}) {
		t.Errorf("after the hold: %+v, want the probe row claimed and deferred", rep)
	}
	if r := f.get(t, a[1]); r.Deferrals != 1 || r.Attempts != 0 {
		t.Errorf("row %d was not the probe and should be untouched: %+v", a[1], r)
	}
	if r := f.get(t, b[0]); r.Status != outbox.StatusPublished {
		t.Errorf("row %d: %s, want published", b[0], r.Status)
	}
}

// The probe is one row; when it goes out the hold ends and the rest follow.
func TestProbeIsOneRowAndItsSuccessReleasesTheRest(t *testing.T) {
	f := newFixture(t, registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}}, outbox.WithDeferralJitter(0))
	ids := f.enqueue(t, orders, 5)
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errBroker }
	if got := f.process(t).ByDestination[orders]; got != (outbox.Counts{Deferred: 5}) {
		t.Fatalf("outage: %+v, want 5 deferred", got)
	}
	f.clock.Advance(time.Minute)
	f.inner.fn = nil
	rep := f.process(t)
	if rep.Claimed != 1 || rep.ByDestination[orders] != (outbox.Counts{Published: 1}) {
		t.Fatalf("probe batch: %+v, want one row, published", rep)
	}
	if r := f.get(t, ids[0]); r.Status != outbox.StatusPublished {
		t.Errorf("the probe was not the oldest row: %+v", r)
	}
	if _, held := f.store.HeldUntil(orders); held {
		t.Error("the destination is still held after its probe went out")
	}
	if got := f.process(t).ByDestination[orders]; got != (outbox.Counts{Published: 4}) {
		t.Errorf("after the probe: %+v, want the other 4 published", got)
	}
	for _, id := range ids {
		if r := f.get(t, id); r.Attempts != 0 {
			t.Errorf("row %d charged %d attempts for an outage", id, r.Attempts)
		}
	}
}

// An outage's budget is time: the destination's rows die of
// ReasonDeferralExhausted once it has been held for MaxCircuitDeferral, never of
// attempts, and not before.
func TestDeferralExhaustionMakesRowsDead(t *testing.T) {
	f := newFixture(t, registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Minute}}, outbox.WithMaxCircuitDeferral(time.Hour))
	ids := f.enqueue(t, orders, 2)
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errBroker }

	dead := 0
	for f.clock.Now().Sub(t0) < 2*time.Hour {
		dead += f.process(t).ByDestination[orders].Dead
		for _, id := range ids {
			r := f.get(t, id)
			if r.Attempts != 0 {
				t.Fatalf("an outage consumed an attempt: %+v", r)
			}
			if r.Status == outbox.StatusDead && f.clock.Now().Sub(t0) <= time.Hour {
				t.Fatalf("row %d dead %v into the outage, within MaxCircuitDeferral", id, f.clock.Now().Sub(t0))
			}
		}
		f.clock.Advance(time.Minute)
	}
	if dead != 2 {
		t.Errorf("%d rows reported dead, want 2", dead)
	}
	for _, id := range ids {
		if r := f.get(t, id); r.Status != outbox.StatusDead || r.LastError != outbox.ReasonDeferralExhausted {
			t.Errorf("row %d: %+v; want dead with %q", id, r, outbox.ReasonDeferralExhausted)
		}
	}
	// One publish opened the circuit, then one probe per 10-minute break.
	if n := f.inner.callsTo(orders); n > 8 {
		t.Errorf("%d publishes in 70 minutes of outage; want one per break", n)
	}
}

var errBroker = errors.New("broker down")

// neutral classifies every error as the message's own.
func neutral(error) breaker.Outcome { return breaker.Neutral }

func TestMessageFailureConsumesAnAttemptAndBacksOff(t *testing.T) {
	hooks := &recordingHooks{}
	f := newFixture(t, registry.Policy{Circuit: breaker.DisabledPolicy()}, outbox.WithHooks(hooks), outbox.WithClassifier(neutral))
	ids := f.enqueue(t, orders, 2)
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errBroker }

	rep := f.process(t)

	// The whole publish failed: the rows are sent one by one. The first fails and
	// keeps back the second, which has the same key.
	if got := rep.ByDestination[orders]; got != (outbox.Counts{Failed: 1, Deferred: 1}) {
		t.Errorf("report %+v, want 1 failed, 1 kept back", got)
	}
	if r := f.get(t, ids[1]); r.Attempts != 0 || r.LeaseOwner != "" {
		t.Errorf("row %d kept back behind its key: %+v; want no attempt, released", ids[1], r)
	}
	// Backoff: 1s for the first failure, less 0.2*0.5 of it.
	want := t0.Add(900 * time.Millisecond)
	for _, id := range ids[:1] {
		r := f.get(t, id)
		if r.Status != outbox.StatusPending || r.Attempts != 1 || r.Deferrals != 0 ||
			!r.VisibleAfter.Equal(want) || r.LastError != errBroker.Error() || r.LeaseOwner != "" {
			t.Errorf("row %d: %+v; want pending, 1 attempt, visible %v, last error %q, released", id, r, want, errBroker)
		}
	}
	if len(hooks.calls) != 1 || hooks.calls[0] != (hookCall{Dest: orders, Failed: 1, Deferred: 1}) {
		t.Errorf("hooks %+v", hooks.calls)
	}

	// The second failure doubles the delay.
	f.clock.Set(want)
	f.process(t)
	if r := f.get(t, ids[0]); r.Attempts != 2 || !r.VisibleAfter.Equal(want.Add(1800*time.Millisecond)) {
		t.Errorf("after the second failure: attempts %d visible %v; want 2, %v", r.Attempts, r.VisibleAfter, want.Add(1800*time.Millisecond))
	}
}

func TestAttemptsExhaustionMakesRowsDead(t *testing.T) {
	f := newFixture(t, registry.Policy{Circuit: breaker.DisabledPolicy()}, outbox.WithMaxAttempts(3), outbox.WithClassifier(neutral))
	id := f.enqueue(t, orders, 1)[0]
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errBroker }

	var reports []outbox.Counts
	for range 3 {
		reports = append(reports, f.process(t).ByDestination[orders])
		f.clock.Advance(time.Hour)
	}
	want := []outbox.Counts{{Failed: 1}, {Failed: 1}, {Dead: 1}}
	for i := range want {
		if reports[i] != want[i] {
			t.Errorf("round %d: %+v, want %+v", i+1, reports[i], want[i])
		}
	}
	r := f.get(t, id)
	if r.Status != outbox.StatusDead || r.Attempts != 3 || r.LastError != outbox.ReasonAttemptsExhausted+": "+errBroker.Error() {
		t.Errorf("row %+v; want dead after 3 attempts with the broker's error", r)
	}
	if rep := f.process(t); rep.Claimed != 0 {
		t.Errorf("a dead row was claimed again")
	}
}

func TestBatchErrorFailsOnlyTheListedMessages(t *testing.T) {
	f := newFixture(t, policy, outbox.WithClassifier(neutral))
	ids := f.enqueue(t, orders, 3)
	f.inner.fn = func(_ context.Context, d transport.Destination, _ []transport.Message) error {
		return &transport.BatchError{Destination: d, Failed: []transport.MessageError{{Index: 1, Err: errBroker}}}
	}

	rep := f.process(t)

	if got := rep.ByDestination[orders]; got != (outbox.Counts{Published: 2, Failed: 1}) {
		t.Errorf("report %+v, want 2 published and 1 failed", got)
	}
	for i, want := range []outbox.Status{outbox.StatusPublished, outbox.StatusPending, outbox.StatusPublished} {
		if r := f.get(t, ids[i]); r.Status != want || (want == outbox.StatusPending) != (r.Attempts == 1) {
			t.Errorf("row %d: status %s attempts %d; want %s", ids[i], r.Status, r.Attempts, want)
		}
	}
}

func TestBatchErrorWithBadIndexFailsEveryRow(t *testing.T) {
	f := newFixture(t, registry.Policy{Circuit: breaker.DisabledPolicy()}, outbox.WithClassifier(neutral))
	f.enqueue(t, orders, 2)
	f.inner.fn = func(_ context.Context, d transport.Destination, _ []transport.Message) error {
		return &transport.BatchError{Destination: d, Failed: []transport.MessageError{{Index: 7, Err: errBroker}}}
	}
	if got := f.process(t).ByDestination[orders]; got != (outbox.Counts{Failed: 1, Deferred: 1}) {
		t.Errorf("report %+v; an index outside the publish must fail the whole publish (the first row failed, the second kept back behind its key)", got)
	}
}

// A circuit that opens while the batch runs: the snapshot said closed, the guarded
// publisher rejects. The rows are deferred to the rejection's NotBefore.
func TestRejectionByGuardedPublisherIsADeferral(t *testing.T) {
	f := newFixture(t, registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, ProbeLease: 3 * time.Second, HalfOpenRetryDelay: 5 * time.Second}})
	ids := f.enqueue(t, orders, 2)
	f.forceOpen(t, orders, t0.Add(time.Second))
	f.clock.Set(t0.Add(2 * time.Second))
	// The deadline passed: the snapshot shows Open in the past, so the processor tries.
	// Take the half-open probe first, so the guarded publisher is rejected.
	c, _ := f.reg.Circuit(orders)
	probe, err := c.Acquire(context.Background())
	if err != nil || !probe.Probe() {
		t.Fatalf("Acquire = %v, probe %v; want the half-open probe", err, probe.Probe())
	}
	defer probe.Complete(breaker.Neutral)

	rep := f.process(t)

	if f.inner.callsTo(orders) != 0 {
		t.Fatal("the inner publisher was called although the guard rejected")
	}
	if got := rep.ByDestination[orders]; got != (outbox.Counts{Deferred: 2}) {
		t.Errorf("report %+v, want 2 deferred", got)
	}
	want := t0.Add(2*time.Second + 5*time.Second + 5*time.Second) // now + HalfOpenRetryDelay + jitter
	if until, _ := f.store.HeldUntil(orders); !until.Equal(want) {
		t.Errorf("held until %v, want %v", until, want)
	}
	for _, id := range ids {
		if r := f.get(t, id); r.Attempts != 0 || r.Deferrals != 1 {
			t.Errorf("row %d: %+v; want deferred without an attempt", id, r)
		}
	}
}

func TestSaturatedCircuitDefersByTheRejectedDelay(t *testing.T) {
	f := newFixture(t, registry.Policy{Circuit: breaker.Policy{Disabled: true, MaxInFlight: 1}}, outbox.WithRejectedDelay(3*time.Second), outbox.WithDeferralJitter(0))
	id := f.enqueue(t, orders, 1)[0]
	c, _ := f.reg.Circuit(orders)
	held, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Complete(breaker.Success)

	if got := f.process(t).ByDestination[orders]; got != (outbox.Counts{Deferred: 1}) {
		t.Errorf("report %+v, want 1 deferred", got)
	}
	until, _ := f.store.HeldUntil(orders)
	if r := f.get(t, id); r.Attempts != 0 || !until.Equal(t0.Add(3*time.Second)) {
		t.Errorf("row %+v held until %v; want held 3s with no attempt", r, until)
	}
}

// Failures through the guard open the circuit; the destination is held and later
// rows are not even claimed.
func TestFailuresOpenTheCircuitAndHoldTheDestination(t *testing.T) {
	f := newFixture(t, registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}})
	first := f.enqueue(t, orders, 1)[0]
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errBroker }
	f.process(t)
	second := f.enqueue(t, orders, 1)[0]
	f.clock.Advance(time.Second)

	rep := f.process(t)

	if f.inner.callsTo(orders) != 1 || rep.Claimed != 0 {
		t.Fatalf("%d calls, %d claimed; the hold should have spared the broker and the rows", f.inner.callsTo(orders), rep.Claimed)
	}
	if r := f.get(t, first); r.Attempts != 0 || r.Deferrals != 1 {
		t.Errorf("first row %+v: want no attempt (an outage) and one deferral", r)
	}
	if r := f.get(t, second); r.Attempts != 0 || r.Deferrals != 0 || r.LeaseOwner != "" {
		t.Errorf("second row %+v: want untouched", r)
	}
}

func TestNoHeadOfLineBlockingByAnOpenDestination(t *testing.T) {
	f := newFixture(t, policy, outbox.WithBatchSize(10))
	f.forceOpen(t, orders, t0.Add(time.Hour))
	f.enqueue(t, orders, 10)
	f.enqueue(t, emails, 10)

	published := 0
	for range 3 {
		published += f.process(t).ByDestination[emails].Published
	}
	if published != 10 {
		t.Errorf("%d of 10 healthy rows published in 3 batches while another destination is open", published)
	}
}

// A batch is bounded in bytes as in rows: of 4 rows of 400 KiB, the default 16 MiB
// takes all of them, WithBatchBytes(1 MiB) two per batch.
func TestBatchBytesBoundABatch(t *testing.T) {
	for _, c := range []struct {
		opts []outbox.ProcessorOption
		want []int
	}{
		{nil, []int{4}},
		{[]outbox.ProcessorOption{outbox.WithBatchBytes(1 << 20)}, []int{2, 2}},
	} {
		f := newFixture(t, policy, c.opts...)
		entries := make([]outbox.Entry, 4)
		for i := range entries {
			entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Value: make([]byte, 400<<10)}}
		}
		if _, err := f.store.Enqueue(context.Background(), entries...); err != nil {
			t.Fatal(err)
		}
		var got []int
		for n := f.process(t).Claimed; n > 0; n = f.process(t).Claimed {
			got = append(got, n)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("batches of %v rows, want %v", got, c.want)
		}
	}
}

func TestCancelledPublishLeavesRowsLeasedUntilReleased(t *testing.T) {
	f := newFixture(t, policy)
	ids := f.enqueue(t, orders, 2)
	ctx, cancel := context.WithCancel(context.Background())
	f.inner.fn = func(ctx context.Context, _ transport.Destination, _ []transport.Message) error {
		cancel()
		return ctx.Err()
	}

	if _, err := f.proc.ProcessPending(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("ProcessPending = %v, want context.Canceled", err)
	}
	r := f.get(t, ids[0])
	if r.Status != outbox.StatusPending || r.Attempts != 0 || !strings.HasPrefix(r.LeaseOwner, f.proc.Owner()+"/") {
		t.Fatalf("row %+v; want pending, no attempt, still leased", r)
	}
	if err := f.store.Release(context.Background(), r.LeaseOwner); err != nil {
		t.Fatal(err)
	}
	f.inner.fn = nil
	if got := f.process(t).ByDestination[orders]; got.Published != 2 {
		t.Errorf("after release: %+v, want both published", got)
	}
}

func TestLeaseEndingMidBatchStopsBeforeTheNextDestination(t *testing.T) {
	f := newFixture(t, policy, outbox.WithLease(10*time.Second))
	f.enqueue(t, orders, 1)
	f.enqueue(t, emails, 1)
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error {
		f.clock.Advance(11 * time.Second)
		return nil
	}

	rep, err := f.proc.ProcessPending(context.Background())
	if !errors.Is(err, outbox.ErrLeaseExpired) {
		t.Fatalf("ProcessPending = %v, want ErrLeaseExpired", err)
	}
	if f.inner.callsTo(emails) != 0 || rep.ByDestination[orders].Published != 1 {
		t.Errorf("report %+v, emails calls %d; want orders published and emails untouched", rep, f.inner.callsTo(emails))
	}
}

// A dispatcher that stops mid-batch keeps its lease; another dispatcher gets the rows
// only after the lease ends.
func TestCrashedDispatchersRowsComeBackAfterTheLease(t *testing.T) {
	f := newFixture(t, policy, outbox.WithLease(30*time.Second))
	ids := f.enqueue(t, orders, 3)
	crashed, err := f.store.Claim(context.Background(), outbox.ClaimRequest{Token: "crashed", Now: t0, Limit: 10, Lease: 30 * time.Second})
	if err != nil || len(crashed) != 3 {
		t.Fatalf("Claim = %d rows, %v", len(crashed), err)
	}

	if rep := f.process(t); rep.Claimed != 0 {
		t.Fatalf("claimed %d rows another dispatcher leases", rep.Claimed)
	}
	f.clock.Advance(30 * time.Second)
	if got := f.process(t).ByDestination[orders]; got.Published != 3 {
		t.Fatalf("after the lease: %+v, want 3 published", got)
	}
	// The crashed dispatcher's late writes change nothing.
	if failed, dead, err := f.store.Fail(context.Background(), "crashed", []outbox.Failure{{ID: ids[0], RetryAt: t0, Err: "late"}}); err != nil || failed+dead != 0 {
		t.Fatalf("late Fail = %d, %d, %v; want nothing changed", failed, dead, err)
	}
	if r := f.get(t, ids[0]); r.Status != outbox.StatusPublished || r.Attempts != 0 {
		t.Errorf("a lost lease's write changed the row: %+v", r)
	}
}

func TestInvalidProcessorOptions(t *testing.T) {
	store := memory.New(nil)
	pub := &fakePublisher{}
	for name, opt := range map[string]outbox.ProcessorOption{
		"batch":    outbox.WithBatchSize(0),
		"bytes":    outbox.WithBatchBytes(0),
		"lease":    outbox.WithLease(-time.Second),
		"attempts": outbox.WithMaxAttempts(0),
		"deferral": outbox.WithMaxCircuitDeferral(0),
		"jitter":   outbox.WithDeferralJitter(-1),
		"backoff":  outbox.WithBackoff(outbox.Backoff{Initial: time.Second, Max: time.Millisecond, Multiplier: 2}),
		"owner":    outbox.WithOwner(""),
		"clock":    outbox.WithClock(nil),
		"probe":    outbox.WithProbeBatch(0),
		"unusable": outbox.WithUnusableBackoff(outbox.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 0.5}),
	} {
		if _, err := outbox.NewProcessor(store, nil, pub, opt, outbox.WithClassifier(outageOnError)); err == nil {
			t.Errorf("%s: NewProcessor accepted an invalid option", name)
		}
	}
	if _, err := outbox.NewProcessor(nil, nil, pub); err == nil {
		t.Error("NewProcessor accepted a nil store")
	}
	// A raw publisher says nothing of its errors: without WithClassifier the
	// Processor cannot tell a bad message from a broker outage, and refuses.
	if _, err := outbox.NewProcessor(store, nil, &fakePublisher{}); !errors.Is(err, outbox.ErrNoClassifier) ||
		!strings.Contains(err.Error(), "WithClassifier") {
		t.Errorf("NewProcessor without a classifier: %v, want ErrNoClassifier naming WithClassifier", err)
	}
}

// A registry that cannot hand out a circuit (its cap is reached) defers the rows
// rather than consuming their attempts.
func TestCircuitUnavailableDefers(t *testing.T) {
	f := newFixture(t, policy)
	reg, err := registry.New(policy, registry.WithMaxDestinations(1), registry.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Circuit(emails); err != nil {
		t.Fatal(err)
	}
	proc, err := outbox.NewProcessor(f.store, reg, reg.Guard(f.inner, nil), outbox.WithClock(f.clock), outbox.WithDeferralJitter(0))
	if err != nil {
		t.Fatal(err)
	}
	id := f.enqueue(t, orders, 1)[0]
	rep, err := proc.ProcessPending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.ByDestination[orders]; got != (outbox.Counts{Deferred: 1}) {
		t.Errorf("report %+v, want 1 deferred", got)
	}
	until, _ := f.store.HeldUntil(orders)
	if r := f.get(t, id); r.Attempts != 0 || !until.Equal(t0.Add(outbox.DefaultRejectedDelay)) {
		t.Errorf("row %+v held until %v; want held for the rejected delay, no attempt", r, until)
	}
}

// A publish cut short by the caller's ctx after some messages went out: those are
// recorded as published (or they would be sent again), the others stay leased with no
// attempt consumed, since they failed only because ctx ended.
func TestCancelledPartialPublishRecordsWhatWentOut(t *testing.T) {
	f := newFixture(t, policy)
	ids := f.enqueue(t, orders, 3)
	ctx, cancel := context.WithCancel(context.Background())
	f.inner.fn = func(ctx context.Context, d transport.Destination, _ []transport.Message) error {
		cancel()
		return &transport.BatchError{Destination: d, Failed: []transport.MessageError{{Index: 1, Err: ctx.Err()}}}
	}

	rep, err := f.proc.ProcessPending(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("ProcessPending = %v, want context.Canceled", err)
	}
	if got := rep.ByDestination[orders]; got != (outbox.Counts{Published: 2}) {
		t.Errorf("report %+v, want the 2 messages that went out published", got)
	}
	for i, want := range []outbox.Status{outbox.StatusPublished, outbox.StatusPending, outbox.StatusPublished} {
		r := f.get(t, ids[i])
		if r.Status != want || r.Attempts != 0 {
			t.Errorf("row %d: status %s attempts %d; want %s and no attempt", ids[i], r.Status, r.Attempts, want)
		}
	}
	if r := f.get(t, ids[1]); !strings.HasPrefix(r.LeaseOwner, f.proc.Owner()+"/") {
		t.Errorf("the unsent row %+v is not left leased for Release", r)
	}
}

// markFailingStore loses its connection on MarkPublished.
type markFailingStore struct{ *memory.Store }

func (markFailingStore) MarkPublished(context.Context, string, time.Time, []int64) (int, error) {
	return 0, errStore
}

// A publish the broker took whose MarkPublished failed: the rows are neither failed
// nor lost; they stay leased, with no attempt, and go out again once released.
func TestMarkPublishedFailureLeavesRowsLeasedNotFailed(t *testing.T) {
	f := newFixture(t, policy)
	ids := f.enqueue(t, orders, 2)
	proc, err := outbox.NewProcessor(markFailingStore{f.store}, f.reg, f.reg.Guard(f.inner, nil),
		outbox.WithClock(f.clock), outbox.WithOwner("flaky-db"))
	if err != nil {
		t.Fatal(err)
	}

	rep, err := proc.ProcessPending(context.Background())
	if !errors.Is(err, errStore) {
		t.Fatalf("ProcessPending = %v, want the store's error", err)
	}
	if rep.Total() != (outbox.Counts{}) {
		t.Errorf("report %+v, want nothing counted", rep.Total())
	}
	// A destination whose dispatch ended in an error and counted nothing is left out
	// of the report (and its hooks), not reported as a dispatch of nothing.
	if c, ok := rep.ByDestination[orders]; ok {
		t.Errorf("report has %+v for %s, want no entry for a dispatch that only failed to write", c, orders)
	}
	for _, id := range ids {
		if r := f.get(t, id); r.Status != outbox.StatusPending || r.Attempts != 0 || !strings.HasPrefix(r.LeaseOwner, "flaky-db/") {
			t.Fatalf("row %+v; want pending, no attempt, still leased", r)
		}
	}
	if err := f.store.Release(context.Background(), f.get(t, ids[0]).LeaseOwner); err != nil {
		t.Fatal(err)
	}
	if got := f.process(t).ByDestination[orders]; got != (outbox.Counts{Published: 2}) {
		t.Errorf("after release: %+v, want both published again", got)
	}
}

// A probe that fails for its message's own reason costs that row an attempt and
// says nothing about the destination: the next claim probes with the next row.
func TestProbeFailingForItsMessageProbesAgainWithTheNextRow(t *testing.T) {
	errTooLarge := errors.New("message too large")
	classify := func(err error) breaker.Outcome {
		if errors.Is(err, errTooLarge) {
			return breaker.Neutral
		}
		return breaker.Failure
	}
	f := newFixture(t, registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}})
	proc, err := outbox.NewProcessor(f.store, f.reg, f.reg.Guard(f.inner, classify), // the guard counts as the Processor does
		outbox.WithClock(f.clock), outbox.WithDeferralJitter(0), outbox.WithClassifier(classify))
	if err != nil {
		t.Fatal(err)
	}
	f.proc = proc
	entries := []outbox.Entry{
		{Destination: orders, Message: transport.Message{Key: []byte("a"), Value: []byte("big")}},
		{Destination: orders, Message: transport.Message{Key: []byte("b"), Value: []byte("ok")}},
		{Destination: orders, Message: transport.Message{Key: []byte("c"), Value: []byte("ok")}},
	}
	ids, err := f.store.Enqueue(context.Background(), entries...)
	if err != nil {
		t.Fatal(err)
	}
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errBroker }
	f.process(t) // an outage: held for the break
	f.clock.Advance(time.Minute)
	f.inner.fn = func(_ context.Context, _ transport.Destination, msgs []transport.Message) error {
		if string(msgs[0].Value) == "big" {
			return errTooLarge
		}
		return nil
	}
	if got := f.process(t).ByDestination[orders]; got != (outbox.Counts{Failed: 1}) {
		t.Fatalf("first probe: %+v, want the big row failed", got)
	}
	if until, held := f.store.HeldUntil(orders); !held || until.After(f.clock.Now()) {
		t.Fatalf("held until %v (%t); want a hold that has ended, for the next probe", until, held)
	}
	if got := f.process(t).ByDestination[orders]; got != (outbox.Counts{Published: 1}) {
		t.Fatalf("second probe: %+v, want the next row published", got)
	}
	if got := f.process(t).ByDestination[orders]; got != (outbox.Counts{Published: 1}) {
		t.Fatalf("after the probe: %+v, want the last row published", got)
	}
	if r := f.get(t, ids[0]); r.Attempts != 1 || r.Status != outbox.StatusPending {
		t.Errorf("big row %+v; want pending with one attempt", r)
	}
}
