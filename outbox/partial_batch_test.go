package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// A batch whose failed entries say the destination is unusable holds it with the
// unusable backoff and gives those rows back uncharged; the entries that went
// through are published. When an outage failed entries too, the hold is the
// outage's and every failed row is given back.
func TestPartialBatchUnusableEntries(t *testing.T) {
	cases := []struct {
		name     string
		failed   []error // entries 0.. of a batch of three
		hold     time.Duration
		unusable bool
	}{
		{"unusable", []error{errForbidden}, 7 * time.Minute, true},
		{"unusable and an outage", []error{errForbidden, errBroker}, time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := unusableFixture(t, outbox.WithUnusableBackoff(outbox.Backoff{Initial: 7 * time.Minute, Max: time.Hour, Multiplier: 2}))
			ids := f.enqueue(t, orders, 3)
			f.inner.fn = func(_ context.Context, d transport.Destination, _ []transport.Message) error {
				be := &transport.BatchError{Destination: d}
				for i, err := range tc.failed {
					be.Failed = append(be.Failed, transport.MessageError{Index: i, Err: err})
				}
				return be
			}
			rep := f.process(t)
			n := len(tc.failed)
			if c := rep.ByDestination[orders]; c.Published != 3-n || c.Deferred != n || c.Failed+c.Dead != 0 {
				t.Errorf("counts %+v, want %d published and %d deferred", c, 3-n, n)
			}
			for i, id := range ids {
				r := f.get(t, id)
				want := outbox.StatusPublished
				if i < n {
					want = outbox.StatusPending
				}
				if r.Status != want || r.Attempts != 0 {
					t.Errorf("row %d: %s, %d attempts; want %s, none spent", id, r.Status, r.Attempts, want)
				}
			}
			until, held := f.store.HeldUntil(orders)
			if !held || until.Sub(t0) != tc.hold {
				t.Errorf("held %v for %v, want %v", held, until.Sub(t0), tc.hold)
			}
			hs, err := f.store.Holds(context.Background())
			if err != nil || len(hs) != 1 || strings.Contains(hs[0].Unusable, "ACCESS_REFUSED") != tc.unusable {
				t.Errorf("holds %+v (%v), want unusable %v", hs, err, tc.unusable)
			}
		})
	}
}

// When rows are sent one at a time and an outage holds the destination part way,
// the rows after it are given back uncharged, and counted.
func TestOutageWhileSendingOneAtATimeGivesBackTheRest(t *testing.T) {
	f := unusableFixture(t)
	ids := f.enqueue(t, orders, 3)
	f.inner.fn = func(_ context.Context, _ transport.Destination, msgs []transport.Message) error {
		switch {
		case len(msgs) > 1:
			return errors.New("one message is too large") // the message's fault: one at a time
		case string(msgs[0].Value) == "orders-b":
			return errBroker
		}
		return nil
	}
	rep := f.process(t)
	if c := rep.ByDestination[orders]; c.Published != 1 || c.Deferred != 2 {
		t.Errorf("counts %+v, want 1 published and 2 deferred", c)
	}
	if len(f.inner.calls) != 3 {
		t.Errorf("%d publishes, want the batch and two single rows", len(f.inner.calls))
	}
	for i, id := range ids[1:] {
		if r := f.get(t, id); r.Status != outbox.StatusPending || r.Attempts != 0 || r.Deferrals != 1 || r.LeaseOwner != "" {
			t.Errorf("row %d: %s, %d attempts, %d deferrals, lease %q; want given back once", i+2, r.Status, r.Attempts, r.Deferrals, r.LeaseOwner)
		}
	}
	if _, held := f.store.HeldUntil(orders); !held {
		t.Error("the outage did not hold the destination")
	}
}
