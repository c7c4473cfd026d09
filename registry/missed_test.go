package registry_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// wantOpenFor asserts that orders' circuit is open until d from now.
func wantOpenFor(t *testing.T, s breaker.Snapshot, d time.Duration) {
	t.Helper()
	if s.State != breaker.Open || !s.NotBefore.Equal(time.Now().Add(d)) {
		t.Fatalf("circuit %v until %v from now, want open for %v", s.State, time.Until(s.NotBefore), d)
	}
}

// A hung broker's deadline misses open a limited circuit for one limit Window, not
// its break (one minute here), and each probe that misses its 200ms deadline (longer
// than the Window) reopens it for a tenth of a Window only, then the next caller is
// the next probe, and the circuit closes with the first probe after the broker
// answers again.
func TestDeadlineMissOfAHungBrokerProbesContinuously(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, broker, pub := busySetup(t)
		window := breaker.RecommendedLimit().Window
		broker.hang(true)
		time.Sleep(1500 * time.Millisecond) // no answer within the last second
		onlineDeadline(t, pub)
		wantOpenFor(t, r.Snapshots()[orders], window)
		time.Sleep(window)
		for range 3 {
			onlineDeadline(t, pub) // the probe
			s := r.Snapshots()[orders]
			wantOpenFor(t, s, window/10)
			time.Sleep(window / 10)
			if s.LastError == "" {
				t.Fatal("the missed probe's error is not kept")
			}
		}
		broker.hang(false)
		if err := pub.Publish(t.Context(), orders, transport.Message{}); err != nil {
			t.Fatalf("first call after the broker answers again: %v", err)
		}
		if s := r.Snapshots()[orders]; s.State != breaker.Closed || s.FailedProbes != 0 {
			t.Fatalf("after the probe succeeded: %v (%d failed probes), want closed", s.State, s.FailedProbes)
		}
	})
}

// An error answer keeps the break.
func TestErrorAnswerOfALimitedCircuitKeepsTheBreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, _ := busySetup(t)
		pub := r.Guard(failing{}, classify)
		if err := pub.Publish(t.Context(), orders, transport.Message{}); err == nil {
			t.Fatal("failing publisher succeeded")
		}
		wantOpenFor(t, r.Snapshots()[orders], limitedOne.BreakDuration)
	})
}

// noAnswerBroker fails every call with an error saying that the client gave up
// waiting for the broker (a read deadline of its own), before the caller's deadline.
type noAnswerBroker struct{ err error }

func (b noAnswerBroker) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return b.err
}

// A failure that says the broker did not answer in time by the client's own clock is
// a missed deadline too: a hung broker's probes fail so once the client has closed
// its connection, and must not put the circuit back on its whole break.
func TestNoAnswerErrorOfALimitedCircuitIsAMissedDeadline(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("publish: %w", transport.ErrNoAnswer),
		&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded},
	} {
		synctest.Test(t, func(t *testing.T) {
			r, _, _ := busySetup(t)
			pub := r.Guard(noAnswerBroker{err}, classify)
			_ = pub.Publish(t.Context(), orders, transport.Message{})
			wantOpenFor(t, r.Snapshots()[orders], breaker.RecommendedLimit().Window)
		})
	}
}
