package sharedstate_test

// Acquire takes one message of this process's adaptive limit, as AcquireRequest does
// (limit.go).

import (
	"context"
	"errors"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// With a limit of one message, a call held through Acquire leaves none: the next
// Acquire is refused with a *LimitError, and one is admitted again once it completes.
func TestAcquireTakesOneMessageOfTheLimit(t *testing.T) {
	c := ruleCircuit(t, newCounting(), fakeclock.New(rulesT0), func(cfg *sharedstate.Config) {
		cfg.Policy.Limit = breaker.LimitPolicy{Max: 1, Min: 1}
	})
	held := esAcquire(t, c)
	p, err := c.Acquire(context.Background())
	var le *breaker.LimitError
	if !errors.As(err, &le) {
		if err == nil {
			p.Complete(breaker.Neutral)
		}
		t.Fatalf("Acquire with the limit's one message held: %v; want a *LimitError", err)
	}
	if s := c.Snapshot(); s.Limit.InFlight != 1 {
		t.Fatalf("limit in flight with one call held: %d; want 1", s.Limit.InFlight)
	}
	held.Complete(breaker.Neutral)
	esAcquire(t, c).Complete(breaker.Neutral)
}
