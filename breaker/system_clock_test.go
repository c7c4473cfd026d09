package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// On the system clock (no WithClock) an open circuit refuses at once until its break
// ends, a closed one with MaxInFlight hands out live permits, and a Shadow circuit
// admits what it would refuse as a bypass. No test here waits: the break is an hour.
func TestSystemClockAdmitsAndRefusesByState(t *testing.T) {
	for _, mode := range []breaker.Mode{breaker.Enforce, breaker.Shadow} {
		b, err := breaker.New("system", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour, MaxInFlight: 2, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.Acquire(t.Context())
		if err != nil || p.Bypass() {
			t.Fatalf("%v: Acquire while closed: %v (bypass %v)", mode, err, p.Bypass())
		}
		before := time.Now()
		if !p.Complete(breaker.Failure) || b.State() != breaker.Open {
			t.Fatalf("%v: the failure did not open the circuit (state %v)", mode, b.State())
		}
		p, err = b.Acquire(t.Context())
		if mode == breaker.Shadow {
			if err != nil || !p.Bypass() {
				t.Fatalf("Shadow: Acquire while open: %v (bypass %v), want a bypass", err, p.Bypass())
			}
			continue
		}
		var oe *breaker.OpenError
		if !errors.As(err, &oe) || oe.NotBefore.Before(before.Add(time.Hour-time.Minute)) || oe.NotBefore.After(time.Now().Add(time.Hour)) {
			t.Fatalf("Enforce: Acquire while open: %v, want an *OpenError about an hour ahead", err)
		}
	}
}
