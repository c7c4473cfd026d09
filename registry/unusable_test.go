package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

var (
	errGone    = errors.New("topic gone")
	errTooBig  = errors.New("too big")
	errBrokerX = errors.New("broker down")
)

func byKind(err error) breaker.Outcome {
	switch {
	case errors.Is(err, errGone):
		return breaker.Unusable
	case errors.Is(err, errTooBig):
		return breaker.Rejected
	case errors.Is(err, errBrokerX):
		return breaker.Failure
	}
	return breaker.Neutral
}

// The unusable mark keeps the time it was first seen while the reason repeats,
// takes a new reason with that time, survives failures (they say nothing of the
// destination), and is cleared by a Success or a Rejected message.
func TestUnusableMark(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 100, BreakDuration: time.Minute}}, registry.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	var next error
	pub := reg.Guard(publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error { return next }), byKind)
	publish := func(err error) breaker.Snapshot {
		next = err
		_ = pub.Publish(context.Background(), d, transport.Message{Value: []byte("x")})
		s, _ := reg.Snapshot(d)
		return s
	}
	first := clock.Now()
	if s := publish(errGone); s.Unusable != "topic gone" || !s.UnusableSince.Equal(first) {
		t.Fatalf("after an Unusable error: %q since %v", s.Unusable, s.UnusableSince)
	}
	clock.Advance(time.Minute)
	if s := publish(errGone); !s.UnusableSince.Equal(first) {
		t.Errorf("the same reason moved the since to %v", s.UnusableSince)
	}
	if s := publish(errors.Join(errGone, errors.New("again"))); s.Unusable == "topic gone" || !s.UnusableSince.Equal(first) {
		t.Errorf("a new reason: %q since %v, want the new text since the first time", s.Unusable, s.UnusableSince)
	}
	if s := publish(errBrokerX); s.Unusable == "" {
		t.Error("a Failure cleared the mark")
	}
	if s := publish(errTooBig); s.Unusable != "" {
		t.Errorf("a Rejected message (the destination took the request) left %q", s.Unusable)
	}
	publish(errGone)
	if s := publish(nil); s.Unusable != "" || !s.UnusableSince.IsZero() {
		t.Errorf("a Success left %q since %v", s.Unusable, s.UnusableSince)
	}
	if snaps := reg.Snapshots(); snaps[d].Unusable != "" {
		t.Errorf("Snapshots: %q", snaps[d].Unusable)
	}
}

// A batch of which no message was published is Unusable when every message was,
// Rejected when one was; one published message makes it a Success.
func TestOutcomeOfABatch(t *testing.T) {
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	batch := func(errs ...error) error {
		be := &transport.BatchError{Destination: d}
		for i, e := range errs {
			be.Failed = append(be.Failed, transport.MessageError{Index: i, Err: e})
		}
		return be
	}
	for _, tc := range []struct {
		err  error
		n    int
		want breaker.Outcome
	}{
		{batch(errGone, errGone), 2, breaker.Unusable},
		{batch(errGone, errTooBig), 2, breaker.Rejected},
		{batch(errGone, errBrokerX), 2, breaker.Failure},
		{batch(errGone), 2, breaker.Success},
		{batch(errors.New("?"), errGone), 2, breaker.Neutral},
	} {
		if got := registry.Outcome(context.Background(), registry.Start{}, tc.err, tc.n, byKind); got != tc.want {
			t.Errorf("Outcome(%v of %d) = %v, want %v", tc.err, tc.n, got, tc.want)
		}
	}
}
