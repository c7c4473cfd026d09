package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// When several destinations' limits refuse a claim that published nothing, Run is
// asked to pause for the shortest of their pauses, whatever their order: a
// destination with a limit of its own comes back after the limit's hint (at least
// a millisecond, at most the rejected delay), one without after the rejected delay.
func TestPausedClaimWaitsForTheShortestPause(t *testing.T) {
	for name, dests := range map[string][]transport.Destination{
		"limited first": {orders, emails},
		"limited last":  {emails, orders},
	} {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			reg, err := registry.New(limitedPolicy, registry.WithClock(clock), registry.WithOverride(emails.String(), policy))
			if err != nil {
				t.Fatal(err)
			}
			store := outbox.NewMemoryStore(clock)
			pub := &fakePublisher{fn: func(context.Context, transport.Destination, []transport.Message) error {
				return &breaker.LimitError{Bulk: true}
			}}
			proc, err := outbox.NewProcessor(store, reg, pub, outbox.WithClock(clock), outbox.WithClassifier(outageOnError),
				outbox.WithRejectedDelay(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range dests {
				if _, err := store.Enqueue(context.Background(), outbox.Entry{Destination: d}); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := proc.ProcessPending(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(pub.calls) != 2 {
				t.Fatalf("%d publishes, want one per destination", len(pub.calls))
			}
			c, err := reg.Circuit(orders)
			if err != nil {
				t.Fatal(err)
			}
			want := min(max(c.(breaker.Limited).Limiter().RetryAfter(), time.Millisecond), 3*time.Second)
			if want >= 3*time.Second || rep.Pause != want {
				t.Errorf("pause %v, want orders' limit's hint %v, shorter than emails' 3s", rep.Pause, want)
			}
		})
	}
}
