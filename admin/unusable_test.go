package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

// A destination whose publishes say it is unusable: its circuit stays closed and
// says why and since when, in the list and alone; the outbox's hold of it says why
// and is counted. A publish that goes through clears it.
func TestUnusableDestinationIsShown(t *testing.T) {
	store := memory.New(fakeclock.New(t0))
	f := newFixture(t, admin.WithOutbox(store))
	clock := f.clock
	forbidden := errors.New("403 ACCESS_REFUSED")
	var fail error = forbidden
	pub := f.reg.Guard(publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error { return fail }),
		func(err error) breaker.Outcome { return breaker.Unusable })
	publish := func() { _ = pub.Publish(context.Background(), orders, transport.Message{Value: []byte("m")}) }
	publish()
	start := f.clock.Now()
	f.clock.Advance(time.Minute)
	publish()
	if _, err := store.Hold(context.Background(), outbox.Hold{Destination: orders, Now: clock.Now(), Until: clock.Now().Add(time.Minute),
		MaxDeferral: time.Hour, Reason: forbidden.Error()}); err != nil {
		t.Fatal(err)
	}

	_, c := f.do(t, req{method: "GET", path: "/api/circuits/kafka:orders"})
	if c["state"] != "closed" || c["unusable"] != "403 ACCESS_REFUSED" || c["unusable_since"] != start.Format(time.RFC3339) {
		t.Errorf("circuit %v, want closed, unusable since %v", c, start)
	}
	_, body := f.do(t, req{method: "GET", path: "/api/circuits"})
	if cs := body["circuits"].([]any); cs[0].(map[string]any)["unusable"] != "403 ACCESS_REFUSED" {
		t.Errorf("list %v", cs)
	}
	_, o := f.do(t, req{method: "GET", path: "/api/outbox"})
	held := o["held"].([]any)
	if o["unusable"].(float64) != 1 || len(held) != 1 || held[0].(map[string]any)["unusable"] != "403 ACCESS_REFUSED" {
		t.Errorf("outbox %v, want the hold's reason and 1 unusable", o)
	}

	fail = nil
	publish()
	if _, c := f.do(t, req{method: "GET", path: "/api/circuits/kafka:orders"}); c["unusable"] != nil || c["unusable_since"] != nil {
		t.Errorf("after a publish went through: %v", c)
	}
}

type publisherFunc func(context.Context, transport.Destination, ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}
