package sharedstate_test

// What counts as the store refusing a write (issue 33): a caller that gives up while
// the write is out is no refusal, so the replica neither degrades nor probes locally.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// esCancelOnWrite cancels the caller's context from inside the next Replace once
// armed, and fails that write with the context's error.
type esCancelOnWrite struct {
	*counting
	cancel func()
}

func (w *esCancelOnWrite) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
		return ctx.Err()
	}
	return w.counting.Replace(ctx, id, expect, next)
}

func TestCallerCancellingDuringALeaseWriteIsNoRefusal(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	w := &esCancelOnWrite{counting: newCounting()}
	c := ruleCircuit(t, w, clock, nil)
	openAt(t, c)
	clock.Advance(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.cancel = cancel
	p, err := c.Acquire(ctx)
	if err == nil {
		p.Complete(breaker.Neutral)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire whose caller cancelled during the lease write: %v; want context.Canceled", err)
	}
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v; want not degraded: a cancelled caller is no refusal", s)
	}
}

// A circuit whose policy cannot open keeps no local evidence: a refused write does not
// make it degraded.
func TestCircuitThatCannotOpenDoesNotDegrade(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.FailureThreshold = 0 })
	if err := c.ForceClose(context.Background(), clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	clock.Advance(time.Minute) // the hold ends; writing its end is refused
	if p, err := c.Acquire(context.Background()); err == nil {
		p.Complete(breaker.Failure)
	}
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v; want not degraded: the policy cannot open", s)
	}
}
