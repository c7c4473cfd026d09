package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/registry"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// obUnguardedFixture is a fixture whose processor publishes straight to the fake
// publisher (the test plays the guard), judging errors by byFault.
func obUnguardedFixture(t *testing.T, opts ...outbox.ProcessorOption) *fixture {
	t.Helper()
	return obUnguardedFixtureOf(t, policy, opts...)
}

// obUnguardedFixtureOf is obUnguardedFixture with circuits of policy p.
func obUnguardedFixtureOf(t *testing.T, p registry.Policy, opts ...outbox.ProcessorOption) *fixture {
	t.Helper()
	f := newFixture(t, p)
	base := []outbox.ProcessorOption{outbox.WithClock(f.clock), outbox.WithClassifier(byFault), outbox.WithRandom(func() float64 { return 0 })}
	var err error
	f.proc, err = outbox.NewProcessor(f.store, f.reg, f.inner, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// obCheckGivenBack checks that the rows are pending, unleased and uncharged, and
// that orders is not held.
func obCheckGivenBack(t *testing.T, f *fixture, ids []int64) {
	t.Helper()
	for _, id := range ids {
		if r := f.get(t, id); r.Status != outbox.StatusPending || r.LeaseOwner != "" || r.Attempts != 0 || r.Deferrals != 0 {
			t.Errorf("row %d: %s, lease %q, %d attempts, %d deferrals; want released with nothing charged", id, r.Status, r.LeaseOwner, r.Attempts, r.Deferrals)
		}
	}
	if until, held := f.store.HeldUntil(orders); held {
		t.Errorf("orders held until %v by a limit's refusal", until)
	}
}

// A publish refused by an adaptive limit (a *admission.LimitError) is paced, not an
// outage: the rows are released when the claim is done, nothing is charged or
// held, and without a limit of its own on the circuit the pause is the rejected
// delay.
func TestLimitRefusedPublishReleasesTheRows(t *testing.T) {
	f := obUnguardedFixture(t, outbox.WithRejectedDelay(3*time.Second))
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error {
		return &admission.LimitError{Bulk: true}
	}
	ids := f.enqueue(t, orders, 2)
	rep := f.process(t)
	if rep.Pause != 3*time.Second {
		t.Errorf("pause %v, want the rejected delay", rep.Pause)
	}
	obCheckGivenBack(t, f, ids)
}

// A publish refused by the adaptive throttle (a *admission.ThrottleError: the
// destination accepts only a share) is paced as a limit's refusal is, the pause
// lasting until the throttle next revises its odds, within the rejected delay.
func TestThrottledPublishReleasesTheRows(t *testing.T) {
	f := obUnguardedFixture(t, outbox.WithRejectedDelay(3*time.Second))
	for _, tc := range []struct {
		name  string
		after time.Duration
		want  time.Duration
	}{
		{"until the throttle's next bucket", 125 * time.Millisecond, 125 * time.Millisecond},
		{"at most the rejected delay", time.Minute, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error {
				return &admission.ThrottleError{NotBefore: f.clock.Now().Add(tc.after), RejectProbability: 0.5}
			}
			ids := f.enqueue(t, orders, 2)
			rep := f.process(t)
			if rep.Pause != tc.want {
				t.Errorf("pause %v, want %v", rep.Pause, tc.want)
			}
			obCheckGivenBack(t, f, ids)
			f.inner.fn = nil
			f.process(t) // publish them, so the next case starts empty
		})
	}
}

// Rows sent one at a time after a message's failure, which the limit refuses part
// way, are released when the claim is done too, not left leased until the lease
// ends.
func TestLimitRefusalWhileSendingOneAtATimeReleasesTheRest(t *testing.T) {
	f := obUnguardedFixture(t)
	f.inner.fn = func(_ context.Context, _ transport.Destination, msgs []transport.Message) error {
		switch {
		case len(msgs) > 1:
			return errors.New("one message is too large")
		case string(msgs[0].Value) == "orders-a":
			return nil
		}
		return &admission.LimitError{Bulk: true}
	}
	ids := f.enqueue(t, orders, 3)
	rep := f.process(t)
	if c := rep.ByDestination[orders]; c.Published != 1 || c.Failed+c.Dead+c.Deferred != 0 {
		t.Errorf("counts %+v, want 1 published, nothing else", c)
	}
	obCheckGivenBack(t, f, ids[1:])
}
