package telemetry

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// A collection reads the snapshots first and the unhealthy times after; a circuit
// that closes in between is seen open with no unhealthy time. That stale reading must
// not become the start of the circuit's next outage, hours later.
func TestStaleOpenSnapshotDoesNotBackdateTheNextOutage(t *testing.T) {
	r := NewRecorder()
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	rec := r.get(d)
	t0 := time.Unix(1_000_000, 0)
	r.ObserveTransition(d, breaker.Transition{From: breaker.Closed, To: breaker.Open, At: t0})
	stale := breaker.Snapshot{State: breaker.Open} // read before the close below
	r.ObserveTransition(d, breaker.Transition{From: breaker.HalfOpen, To: breaker.Closed, At: t0.Add(time.Minute)})
	rec.unhealthyFor(stale, t0.Add(time.Minute))

	t1 := t0.Add(time.Hour)
	r.ObserveTransition(d, breaker.Transition{From: breaker.Closed, To: breaker.Open, At: t1})
	if got := rec.unhealthyFor(breaker.Snapshot{State: breaker.Open}, t1.Add(time.Second)); got != time.Second {
		t.Fatalf("unhealthy for %v a second into the second outage, want 1s", got)
	}
}

// Without transitions (New without WithRecorder) the unhealthy duration runs from the
// first collection that sees the circuit unhealthy, and ends when one sees it closed:
// the next outage starts from zero, not from the first one's start.
func TestUnhealthyWithoutTransitionsEndsWhenClosed(t *testing.T) {
	rec := NewRecorder().get(transport.Destination{Broker: "kafka", Name: "orders"})
	open, closed := breaker.Snapshot{State: breaker.Open}, breaker.Snapshot{State: breaker.Closed}
	t0 := time.Unix(1_000_000, 0)
	for _, step := range []struct {
		s    breaker.Snapshot
		at   time.Duration
		want time.Duration
	}{
		{open, 0, 0},
		{open, time.Minute, time.Minute},
		{closed, 2 * time.Minute, 0},
		{open, time.Hour, 0},
		{open, time.Hour + time.Second, time.Second},
	} {
		if got := rec.unhealthyFor(step.s, t0.Add(step.at)); got != step.want {
			t.Fatalf("%v at %v: unhealthy for %v, want %v", step.s.State, step.at, got, step.want)
		}
	}
}
