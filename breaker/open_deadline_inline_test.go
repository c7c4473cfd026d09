package breaker

import (
	"context"
	"testing"
	"time"
)

// On the system clock an open circuit refuses without the lock only before its
// deadline: a call at or after it goes on to become the half-open probe.
func TestInlineOpenRefusalEndsAtTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		epoch func(b *Breaker) // where the breaker's clock starts
		until func() time.Time // the ForceOpen's deadline
	}{
		// A hold whose end has already passed: the deadline is the epoch itself.
		{"after", func(*Breaker) {}, func() time.Time { return time.Now().Add(-time.Hour) }},
		// The system clock cannot be stopped at the deadline, so the epoch is put so
		// far back (no monotonic reading) that the clock's reading and the deadline
		// both saturate at the largest Duration: the call comes exactly at it.
		{"at", func(b *Breaker) { b.epoch = time.Time{} }, func() time.Time { return time.Now().Add(time.Hour) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New("system", Policy{FailureThreshold: 1, BreakDuration: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			tc.epoch(b)
			b.ForceOpen(tc.until())
			if tc.name == "at" {
				if d := b.cur.Load().deadline; d != int64(time.Since(b.epoch)) {
					t.Fatalf("deadline %d is not the clock's reading %d", d, int64(time.Since(b.epoch)))
				}
			}
			p, err := b.Acquire(context.Background())
			if err != nil {
				t.Fatalf("Acquire at the end of the hold: %v, want the probe", err)
			}
			if b.State() != HalfOpen || p.Bypass() {
				t.Fatalf("state %v (bypass %v) after the hold ended, want the half-open probe", b.State(), p.Bypass())
			}
		})
	}
}
