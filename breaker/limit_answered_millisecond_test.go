package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Answered keeps the time of the last success to the millisecond, written at most
// once a millisecond so that healthy traffic does not write it on every call: a
// success less than a millisecond after the one kept is not written, one exactly a
// millisecond after it is.
func TestLimitAnsweredKeepsTheLastSuccessToTheMillisecond(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 10})
	success := func() { l.lim.Release(l.take(1, breaker.Online), breaker.Success, false) }
	first := l.clock.Advance(time.Second)
	success()
	l.clock.Advance(time.Millisecond - 1)
	success() // within the millisecond: the first success stays the one kept
	l.clock.Set(first.Add(time.Second + 1))
	if l.lim.Answered() {
		t.Fatal("Answered a second and 1ns after the success kept: the one within its millisecond was written")
	}

	kept := l.clock.Now()
	success()
	l.clock.Advance(time.Millisecond)
	success() // exactly a millisecond later: written
	l.clock.Set(kept.Add(time.Second + time.Millisecond))
	if !l.lim.Answered() {
		t.Fatal("not Answered a second after a success a millisecond after the one kept")
	}
}
