package sharedstate_test

// One ramp per closed generation (circuit.go: newView): a replica that reads the
// record again during a ramp keeps the ramp it had, so that its decisions go on where
// they were, and a replica whose first read finds a ramp running joins it.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// sa3RampDecisions makes n calls on c and returns them as a string of 'a' (admitted)
// and 'r' (turned away by the ramp).
func sa3RampDecisions(t *testing.T, c *sharedstate.Circuit, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		p, err := c.Acquire(context.Background())
		switch {
		case err == nil:
			p.Complete(breaker.Neutral)
			b.WriteByte('a')
		case errors.Is(err, breaker.ErrRamping):
			b.WriteByte('r')
		default:
			t.Fatalf("call %d during the ramp: %v; want admitted or ErrRamping", i, err)
		}
	}
	return b.String()
}

// sa3Ramping returns a circuit that reads the record on every Acquire (a negative
// MaxStaleness) and has not read it yet, over a record that another replica closed by
// a probe 5 s ago, half way through a 10 s ramp: the ramp admits half the calls.
func sa3Ramping(t *testing.T) *sharedstate.Circuit {
	t.Helper()
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	ramp := func(cfg *sharedstate.Config) { cfg.Policy.RampDuration = 10 * time.Second }
	other := ruleCircuit(t, d, clock, ramp)
	if err := other.Refresh(context.Background()); err != nil { // creates the record
		t.Fatal(err)
	}
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.Generation += 3 // opened, half-open, closed by a probe
		r.Reason, r.Since = breaker.ReasonProbeSucceeded, clock.Now().Add(-5*time.Second).UnixNano()
	})
	return ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		ramp(cfg)
		cfg.MaxStaleness = -1
	})
}

// A replica whose first read finds the fleet ramping ramps too: at a share of one
// half it turns calls away.
func TestFirstReadDuringARampJoinsIt(t *testing.T) {
	c := sa3Ramping(t)
	if got := sa3RampDecisions(t, c, 20); !strings.Contains(got, "r") {
		t.Fatalf("20 calls of a replica that first read the record half way through the ramp: %s; want some turned away", got)
	}
}

// Reading the record again does not start the ramp's decisions afresh: they go on
// along one Weyl sequence, which at a share of one half never admits, nor turns away,
// three calls in a row (its points step by the golden ratio, 0.618 modulo 1). Decisions
// started afresh at each read from a random seed are coin tosses: 100 of them without
// such a run have a chance below 1e-9.
func TestRampDecisionsGoOnAcrossReads(t *testing.T) {
	c := sa3Ramping(t)
	got := sa3RampDecisions(t, c, 100)
	for _, run := range []string{"aaa", "rrr"} {
		if i := strings.Index(got, run); i >= 0 {
			t.Fatalf("100 calls at a ramp share of one half, each reading the record: %s; %q at call %d: the decisions started afresh at a read",
				got, run, i)
		}
	}
}
