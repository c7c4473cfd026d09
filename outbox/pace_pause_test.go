package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// When several destinations' limits refuse a claim that published nothing, Run is
// asked to pause for the shortest of their pauses, whatever their order: a
// destination with a limit of its own comes back after the limit's hint (at least
// a millisecond, at most the rejected delay), one without after the rejected delay;
// a destination whose publish failed asks for no pause and takes none away.
func TestPausedClaimWaitsForTheShortestPause(t *testing.T) {
	invoices := transport.Destination{Broker: "kafka", Name: "invoices"}
	for name, dests := range map[string][]transport.Destination{
		"limited first": {orders, emails},
		"limited last":  {emails, orders},
		// invoices' publish fails for its message's reason: no pause of its own.
		"then a failure": {orders, invoices},
	} {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			reg, err := registry.New(limitedPolicy, registry.WithClock(clock), registry.WithOverride(emails.String(), policy))
			if err != nil {
				t.Fatal(err)
			}
			store := memory.New(clock)
			pub := &fakePublisher{fn: func(_ context.Context, d transport.Destination, _ []transport.Message) error {
				if d == invoices {
					return errors.New("message too large")
				}
				return &admission.LimitError{Bulk: true}
			}}
			proc, err := outbox.NewProcessor(store, reg, pub, outbox.WithClock(clock), outbox.WithClassifier(byFault),
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
			lim, err := reg.Admission(orders)
			if err != nil {
				t.Fatal(err)
			}
			want := min(max(lim.RetryAfter(), time.Millisecond), 3*time.Second)
			if want >= 3*time.Second || rep.Pause != want {
				t.Errorf("pause %v, want orders' limit's hint %v, the shortest", rep.Pause, want)
			}
		})
	}
}
