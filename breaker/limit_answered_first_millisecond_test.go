package breaker_test

import (
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
)

// A success completed in the limiter's very first instant (before a millisecond has
// passed on its clock) counts as an answer: the dependency Answered.
func TestLimiterAnsweredBySuccessInItsFirstMillisecond(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 10})
	if l.lim.Answered() {
		t.Fatal("Answered before any call")
	}
	l.lim.Release(l.take(1, breaker.Online), breaker.Success, false)
	if !l.lim.Answered() {
		t.Fatal("not Answered after a success at the limiter's start")
	}
}
