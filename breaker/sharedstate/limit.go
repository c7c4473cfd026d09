package sharedstate

import (
	"context"

	"github.com/brokerguard/brokerguard/breaker"
)

// Acquire asks to make one call (see acquire for what a shared circuit decides and
// how it refuses). With an adaptive limit (Policy.Limit) the call also takes one
// message of this process's limit, as AcquireRequest does.
func (c *Circuit) Acquire(ctx context.Context) (breaker.Permit, error) {
	if c.lim == nil {
		return c.acquire(ctx)
	}
	return c.AcquireRequest(ctx, breaker.Request{})
}

// AcquireRequest is Acquire for a call of r.Weight messages and priority r.Priority.
// The adaptive limit of a shared circuit is kept per process, never in the shared
// record: each replica bounds its own calls in flight by the latency it sees, while
// the open/closed state stays fleet-wide. The shared state decides first (an open
// circuit refuses with its *breaker.OpenError); a closed circuit's call then takes
// its messages from the limit, or is refused with a *breaker.LimitError. Probes are
// not limited.
func (c *Circuit) AcquireRequest(ctx context.Context, r breaker.Request) (breaker.Permit, error) {
	p, err := c.acquire(ctx)
	if err != nil || c.lim == nil || p.Probe() {
		return p, err
	}
	slot, err := c.lim.Acquire(r)
	if err != nil {
		p.Complete(breaker.Neutral) // gives back what the circuit lent, changes nothing
		return breaker.Permit{}, err
	}
	return p.WithSlot(slot), nil
}

// Limiter returns this process's adaptive limit of the circuit, or nil when the
// policy has none.
func (c *Circuit) Limiter() *breaker.Limiter { return c.lim }

var (
	_ breaker.RequestAcquirer = (*Circuit)(nil)
	_ breaker.Limited         = (*Circuit)(nil)
)
