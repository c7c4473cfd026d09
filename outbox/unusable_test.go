package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// errForbidden stands for a broker's "this user may not write the destination".
var errForbidden = errors.New("403 ACCESS_REFUSED: no write permission")

// byFault is a classifier that knows errForbidden is the destination's fault.
func byFault(err error) breaker.Outcome {
	switch {
	case errors.Is(err, errForbidden):
		return breaker.Unusable
	case errors.Is(err, errBroker):
		return breaker.Failure
	}
	return breaker.Rejected
}

// unusableFixture is a fixture whose processor takes byFault from the guarded
// publisher (no WithClassifier).
func unusableFixture(t *testing.T, opts ...outbox.ProcessorOption) *fixture {
	t.Helper()
	f := newFixture(t, policy)
	base := []outbox.ProcessorOption{
		outbox.WithClock(f.clock), outbox.WithRandom(func() float64 { return 0.5 }),
		outbox.WithDeferralJitter(0), outbox.WithMaxAttempts(4),
	}
	var err error
	f.proc, err = outbox.NewProcessor(f.store, f.reg, f.reg.Guard(f.inner, byFault), append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A permission revoked for ten minutes: no row dies or spends an attempt, the
// destination is held with a growing capped backoff and probed with one row, the
// hold and the registry say why, and once the permission is back every row goes out
// in order.
func TestUnusableDestinationIsHeldNotCharged(t *testing.T) {
	f := unusableFixture(t)
	ids := f.enqueue(t, orders, 20)
	var revoked atomic.Bool
	revoked.Store(true)
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error {
		if revoked.Load() {
			return fmt.Errorf("publish: %w", errForbidden)
		}
		return nil
	}
	start := f.clock.Now()
	var holds []time.Duration
	probes := 0
	for f.clock.Now().Sub(start) < 10*time.Minute {
		before := len(f.inner.calls)
		f.process(t)
		if n := len(f.inner.calls) - before; n > 0 {
			probes++
			if last := f.inner.calls[len(f.inner.calls)-1]; len(last.Msgs) != 1 && probes > 1 {
				t.Fatalf("probe %d sent %d messages, want 1", probes, len(last.Msgs))
			}
		}
		until, held := f.store.HeldUntil(orders)
		if !held {
			t.Fatal("the unusable destination is not held")
		}
		holds = append(holds, until.Sub(f.clock.Now()))
		hs, err := f.store.Holds(context.Background())
		if err != nil || len(hs) != 1 || !strings.Contains(hs[0].Unusable, "ACCESS_REFUSED") {
			t.Fatalf("holds %+v (%v), want orders held with the reason", hs, err)
		}
		if s, _ := f.reg.Snapshot(orders); s.State != breaker.Closed || !strings.Contains(s.Unusable, "ACCESS_REFUSED") {
			t.Fatalf("snapshot %+v, want closed and unusable with the reason", s)
		}
		f.clock.Set(until)
	}
	for _, id := range ids {
		if r := f.get(t, id); r.Status != outbox.StatusPending || r.Attempts != 0 {
			t.Fatalf("row %d after the outage: %s, %d attempts; want pending, none", id, r.Status, r.Attempts)
		}
	}
	// 5s, 10s, 20s, ... less a tenth (jitter 0.2 at 0.5), capped at 5m.
	for i, d := range holds {
		want := min(5*time.Second<<i, 5*time.Minute)
		want -= want / 10
		if d != want {
			t.Errorf("hold %d lasted %v, want %v (holds %v)", i+1, d, want, holds)
		}
	}
	if probes != len(holds) {
		t.Errorf("%d publishes for %d holds, want one probe per hold", probes, len(holds))
	}

	revoked.Store(false)
	for range 5 {
		f.process(t)
		f.clock.Advance(time.Second)
	}
	var got []string
	for _, c := range f.inner.calls[probes:] {
		for _, m := range c.Msgs {
			got = append(got, string(m.Value))
		}
	}
	if len(got) != len(ids) {
		t.Fatalf("published %d after the fix, want %d: %v", len(got), len(ids), got)
	}
	for i, id := range ids {
		r := f.get(t, id)
		if want := "orders-" + string(rune('a'+i%26)); r.Status != outbox.StatusPublished || got[i] != want {
			t.Errorf("row %d: %s, published %q at %d; want published %q in order", id, r.Status, got[i], i, want)
		}
	}
	if _, held := f.store.HeldUntil(orders); held {
		t.Error("still held after the probe went out")
	}
	if s, _ := f.reg.Snapshot(orders); s.Unusable != "" {
		t.Errorf("snapshot still says unusable: %q", s.Unusable)
	}
}

// A rejected message among good ones spends its attempts and dies alone; the
// destination is not held.
func TestRejectedMessageDiesAlone(t *testing.T) {
	f := unusableFixture(t)
	f.enqueue(t, orders, 3)
	errTooLarge := errors.New("message too large")
	f.inner.fn = func(_ context.Context, _ transport.Destination, msgs []transport.Message) error {
		for _, m := range msgs {
			if string(m.Value) == "orders-b" {
				return errTooLarge
			}
		}
		return nil
	}
	var dead, published int
	for range 6 {
		c := f.process(t).Total()
		dead, published = dead+c.Dead, published+c.Published
		f.clock.Advance(time.Hour)
	}
	if dead != 1 || published != 2 {
		t.Errorf("%d dead, %d published; want the rejected one dead alone and 2 published", dead, published)
	}
}
