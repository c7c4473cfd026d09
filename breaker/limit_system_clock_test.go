package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A Limiter on the system clock (NewLimiter with no clock) counts time from when it
// was made: a refusal's NotBefore lies after the refused call began and at most the
// retry hint (the Window, before a baseline) and a millisecond's rounding after it
// returned. No test here waits.
func TestLimiterOnTheSystemClockRefusesUntilAfterNow(t *testing.T) {
	l := breaker.NewLimiter("system", breaker.LocalProcess, breaker.LimitPolicy{Max: 1, Window: time.Second}, nil)
	if _, err := l.Acquire(breaker.Request{Weight: 1}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	_, err := l.Acquire(breaker.Request{Weight: 1})
	after := time.Now()
	var le *breaker.LimitError
	if !errors.As(err, &le) {
		t.Fatalf("a call past a full limit: %v, want a *LimitError", err)
	}
	if le.NotBefore.Before(before) || le.NotBefore.After(after.Add(time.Second+time.Millisecond)) {
		t.Fatalf("NotBefore %v, want within [%v, %v]", le.NotBefore, before, after.Add(time.Second+time.Millisecond))
	}
}
