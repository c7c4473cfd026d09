package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/registry"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// A circuit's refusal (open, saturated, state unavailable) is an outage whatever
// the classifier says of it: the destination is held and the row spends nothing,
// also on a circuit with an adaptive limit (whose closed circuit's own outage
// failures are retried without a hold).
func TestCircuitRefusalsAreOutagesWhateverTheClassifier(t *testing.T) {
	for _, p := range []registry.Policy{policy, limitedPolicy} {
		for _, refusal := range []error{
			&breaker.OpenError{NotBefore: t0.Add(time.Minute)},
			breaker.ErrSaturated,
			breaker.ErrUnavailable,
		} {
			t.Run(fmt.Sprintf("%s, limit %v", refusal, p.Admission.Enabled()), func(t *testing.T) {
				f := obUnguardedFixtureOf(t, p, outbox.WithClassifier(func(error) breaker.Outcome { return breaker.Rejected }))
				f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return refusal }
				ids := f.enqueue(t, orders, 1)
				f.process(t)
				if r := f.get(t, ids[0]); r.Status != outbox.StatusPending || r.Attempts != 0 || r.Deferrals != 1 {
					t.Errorf("row: %s, %d attempts, %d deferrals; want given back uncharged", r.Status, r.Attempts, r.Deferrals)
				}
				if _, held := f.store.HeldUntil(orders); !held {
					t.Error("the destination is not held")
				}
			})
		}
	}
}

// The unusable backoff counts the holds in a row: a publish that goes through,
// whole or in part, starts it over.
func TestUnusableBackoffStartsOverAfterAPublish(t *testing.T) {
	for _, tc := range []struct {
		name    string
		through func(d transport.Destination, n int) error // the answer that lets rows through
	}{
		{"whole", func(transport.Destination, int) error { return nil }},
		{"in part", func(d transport.Destination, n int) error {
			return &transport.BatchError{Destination: d, Failed: []transport.MessageError{{Index: n - 1, Err: errForbidden}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := unusableFixture(t, outbox.WithProbeBatch(2),
				outbox.WithUnusableBackoff(outbox.Backoff{Initial: 7 * time.Minute, Max: time.Hour, Multiplier: 2}))
			f.enqueue(t, orders, 6)
			answers := []bool{false, true, false} // forbidden, through, forbidden
			f.inner.fn = func(_ context.Context, d transport.Destination, msgs []transport.Message) error {
				ok := answers[0]
				answers = answers[1:]
				if ok {
					return tc.through(d, len(msgs))
				}
				return errForbidden
			}
			var holds []time.Duration
			for range 3 {
				now := f.clock.Now()
				f.process(t)
				until, held := f.store.HeldUntil(orders)
				if !held {
					holds = append(holds, 0)
					continue
				}
				holds = append(holds, until.Sub(now))
				f.clock.Set(until)
			}
			if last := holds[len(holds)-1]; last != 7*time.Minute {
				t.Errorf("holds %v: the one after rows went through lasted %v, want the first delay, 7m", holds, last)
			}
		})
	}
}

// An outage of part of a probe's batch keeps the destination held (for the rejected
// delay); the probe does not end the hold.
func TestPartialOutageOfAProbeKeepsTheHold(t *testing.T) {
	f := obUnguardedFixture(t, outbox.WithProbeBatch(2), outbox.WithDeferralJitter(0), outbox.WithRejectedDelay(5*time.Second))
	f.enqueue(t, orders, 3)
	if _, err := f.store.Hold(context.Background(), outbox.Hold{Destination: orders, Token: "x", Now: t0, Until: t0, MaxDeferral: time.Hour}); err != nil {
		t.Fatal(err)
	}
	f.inner.fn = func(_ context.Context, d transport.Destination, msgs []transport.Message) error {
		return &transport.BatchError{Destination: d, Failed: []transport.MessageError{{Index: 1, Err: errBroker}}}
	}
	f.clock.Advance(time.Second)
	rep := f.process(t)
	if c := rep.ByDestination[orders]; c.Published != 1 || c.Deferred != 1 {
		t.Errorf("counts %+v, want 1 published and 1 deferred", c)
	}
	if until, held := f.store.HeldUntil(orders); !held || until.Sub(f.clock.Now()) != 5*time.Second {
		t.Errorf("held %v until %v from now, want 5s", held, until.Sub(f.clock.Now()))
	}
}

// obDeadThenDown is a store that could not decode row 1 and loses its connection on
// MarkPublished.
type obDeadThenDown struct{ obRewriteStore }

func (obDeadThenDown) MarkPublished(context.Context, string, time.Time, []int64) (int, error) {
	return 0, errStore
}

// What a destination's rows came to before a store error ends the batch is still
// reported, and told to the hooks.
func TestCountsBeforeAStoreErrorAreReported(t *testing.T) {
	f := newFixture(t, policy)
	hooks := &recordingHooks{}
	store := obDeadThenDown{obRewriteStore{f.store, func(r *outbox.Record) {
		if r.ID == 1 {
			r.Undecodable = "bad"
		}
	}}}
	var err error
	f.proc, err = outbox.NewProcessor(store, f.reg, f.reg.Guard(f.inner, nil), outbox.WithClock(f.clock), outbox.WithHooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	f.enqueue(t, orders, 2)
	rep, err := f.proc.ProcessPending(context.Background())
	if !errors.Is(err, errStore) {
		t.Fatalf("ProcessPending = %v, want the store's error", err)
	}
	if c := rep.ByDestination[orders]; c.Dead != 1 {
		t.Errorf("report %+v, want the dead row counted", rep.ByDestination)
	}
	if len(hooks.calls) != 1 || hooks.calls[0].Dead != 1 {
		t.Errorf("hooks saw %+v, want one dispatch with the dead row", hooks.calls)
	}
}

// A claim asks Run to pause only when its limits kept it from publishing anything:
// one destination paced while another published is no reason to wait.
func TestPauseOnlyWhenNothingWasPublished(t *testing.T) {
	f := obUnguardedFixture(t)
	f.inner.fn = func(_ context.Context, d transport.Destination, _ []transport.Message) error {
		if d == orders {
			return &admission.LimitError{Bulk: true}
		}
		return nil
	}
	f.enqueue(t, orders, 1)
	f.enqueue(t, emails, 1)
	if rep := f.process(t); rep.Pause != 0 || rep.Total().Published != 1 {
		t.Errorf("pause %v with %d published, want none", rep.Pause, rep.Total().Published)
	}
	if rep := f.process(t); rep.Pause == 0 || rep.Total().Published != 0 {
		t.Errorf("pause %v with %d published, want a pause", rep.Pause, rep.Total().Published)
	}
}
