package registry

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Route asks each of the n partitions once: an unkeyed message that every partition
// refuses is refused with pick's first answer, even when pick's isolation ends while
// Route asks the others (Admit takes an isolated partition's probe, so asking pick
// again would send the message as its probe on a later reading of the clock).
func TestRouteAsksEachPartitionOnce(t *testing.T) {
	ps, err := mrNewRegistry(t, WithPartitionPolicy(PartitionPolicy{Failures: 2, Isolation: time.Minute})).Partitions(mrOrders)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at, step := t0, time.Duration(0)
	ps.now = func() time.Time { now := at; at = at.Add(step); return now }
	ps.Complete(0, breaker.Failure)
	ps.Complete(0, breaker.Failure) // 0 isolated until t0+1m
	at = t0.Add(30 * time.Second)
	ps.Complete(1, breaker.Failure)
	ps.Complete(1, breaker.Failure) // 1 isolated until t0+1m30s
	ps.Complete(2, breaker.Failure) // 2 (beyond the 2 partitions Route is given) still answers

	at, step = t0.Add(time.Minute-time.Nanosecond), time.Nanosecond // each reading a nanosecond later
	p, err := ps.Route(0, 2, false)
	var pe *PartitionRejectedError
	if p != 0 || err == nil || !errors.As(err, &pe) || pe.Partition != 0 {
		t.Fatalf("Route(0, 2) = %d, %v; want 0 refused with partition 0's refusal", p, err)
	}
	step = 0
	if err := ps.Admit(0); err != nil {
		t.Fatalf("partition 0's probe was taken by the refused Route: Admit(0) = %v", err)
	}
}
