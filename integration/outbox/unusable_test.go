package outbox_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// On both stores: a destination unusable for ten minutes (fake clock) is held, its
// rows uncharged and probed one at a time, the hold says why, and every row goes out
// in order once it works.
func TestUnusableDestinationOnBothStores(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		errForbidden := errors.New("403 ACCESS_REFUSED")
		var refusing atomic.Bool
		refusing.Store(true)
		var published []string
		pub := publisherFunc(func(_ context.Context, _ transport.Destination, msgs ...transport.Message) error {
			if refusing.Load() {
				return errForbidden
			}
			for _, m := range msgs {
				published = append(published, string(m.Value))
			}
			return nil
		})
		reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}}, registry.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		proc, err := outbox.NewProcessor(sc.store, reg, reg.Guard(pub, func(err error) breaker.Outcome {
			if errors.Is(err, errForbidden) {
				return breaker.Unusable
			}
			return breaker.Failure
		}), outbox.WithClock(clock), outbox.WithDeferralJitter(0), outbox.WithMaxAttempts(2))
		if err != nil {
			t.Fatal(err)
		}
		entries := make([]outbox.Entry, 10)
		for i := range entries {
			entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}}
		}
		ids := sc.enqueue(t, entries...)
		oc := sc.store.(outbox.OnCall)
		begin := clock.Now()
		for clock.Now().Sub(begin) < 10*time.Minute {
			if _, err := proc.ProcessPending(context.Background()); err != nil {
				t.Fatal(err)
			}
			hs, err := oc.Holds(context.Background())
			if err != nil || len(hs) != 1 || hs[0].Unusable != errForbidden.Error() {
				t.Fatalf("holds %+v, %v; want orders held as unusable", hs, err)
			}
			clock.Set(hs[0].Until)
		}
		for _, id := range ids {
			if r := sc.get(t, id); r.Status != outbox.StatusPending || r.Attempts != 0 {
				t.Fatalf("row %d: %s, %d attempts", id, r.Status, r.Attempts)
			}
		}
		refusing.Store(false)
		for range 4 {
			if _, err := proc.ProcessPending(context.Background()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Second)
		}
		if len(published) != len(ids) {
			t.Fatalf("published %v, want all %d", published, len(ids))
		}
		for i, v := range published {
			if v != strconv.Itoa(i) {
				t.Fatalf("published %v: out of order", published)
			}
		}
	})
}
