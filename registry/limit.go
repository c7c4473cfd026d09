package registry

import (
	"context"
	"errors"
	"os"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// limited is what an entry keeps of a circuit whose adaptive limit is on: the limit,
// and the circuit's weighted Acquire. Both are nil otherwise, and guarded calls take
// the plain Acquire path, reading no context value.
type limited struct {
	lim *breaker.Limiter
	req breaker.RequestAcquirer
}

func limitedOf(c breaker.Circuit) limited {
	l, ok := c.(breaker.Limited)
	if !ok {
		return limited{}
	}
	req, ok := c.(breaker.RequestAcquirer)
	if lim := l.Limiter(); lim != nil && ok {
		return limited{lim: lim, req: req}
	}
	return limited{}
}

// acquire takes a permit for a call of n messages: weighed, and with the priority
// ctx carries (breaker.WithPriority), when the circuit has an adaptive limit.
func (e *entry) acquire(ctx context.Context, n int) (breaker.Permit, error) {
	if e.lim == nil {
		return e.circuit.Acquire(ctx)
	}
	return e.req.AcquireRequest(ctx, breaker.Request{Weight: n, Priority: breaker.PriorityOf(ctx)})
}

// AcquireN is Acquire for a call of n messages: a circuit with an adaptive limit
// weighs it by n and by the priority ctx carries (breaker.WithPriority). Complete the
// permit with Finish, or with Complete.
func (r *Registry) AcquireN(ctx context.Context, d transport.Destination, n int) (breaker.Permit, error) {
	e, err := r.entry(d)
	if err != nil {
		return breaker.Permit{}, err
	}
	permit, err := e.acquire(ctx, max(n, 1))
	if err != nil {
		return breaker.Permit{}, e.refused(refusal(ctx, d, err))
	}
	return permit, nil
}

// Finish completes the permit of a call of n messages to d that returned err, as
// Guard does: Outcome with the busy rule and drops of an adaptive limit (see
// Outcome), and counts the call (WithCallCounts). It returns the outcome the circuit
// was given. Publishers that complete permits themselves use it instead of Outcome
// and Complete.
func (r *Registry) Finish(ctx context.Context, d transport.Destination, p breaker.Permit, s Start, err error, n int, classify transport.Classifier) breaker.Outcome {
	if classify == nil {
		classify = failAll
	}
	e, ok := r.lookup(d)
	if !ok {
		o := Outcome(ctx, s, err, n, classify)
		p.Complete(o)
		return o
	}
	return e.finish(ctx, p, s, err, n, classify)
}

// finish applies Outcome, and for a limited circuit the busy rule and drops, to the
// permit of a call that returned err.
func (e *entry) finish(ctx context.Context, p breaker.Permit, s Start, err error, n int, classify transport.Classifier) breaker.Outcome {
	return e.settle(ctx, p, Outcome(ctx, s, err, n, classify), s, err)
}

// settle completes p with o, the Outcome of a call that returned err, applying for a
// limited circuit the busy rule and drops.
func (e *entry) settle(ctx context.Context, p breaker.Permit, o breaker.Outcome, s Start, err error) breaker.Outcome {
	if e.lim == nil || err == nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		if e.lim != nil && o == breaker.Failure && noAnswer(err) {
			// The client's own clock gave up on the broker (a read deadline, a
			// heartbeat): a missed deadline too, not an error answer.
			e.completeMissed(p, err)
			return o
		}
		e.complete(p, o, err)
		return o
	}
	// The call was ended by its deadline. It never reached a destination that
	// answers other calls (it was still in the client's set-up, a channel opening at
	// the slow pace): no evidence, and no work the limit must shed; the opening goes
	// on, and serves a later call.
	if o == breaker.Failure && errors.Is(err, transport.ErrNotSent) && e.lim.Answered() {
		e.complete(p, breaker.Neutral, err)
		return breaker.Neutral
	}
	// Otherwise a drop for the limit whatever the circuit makes of it, and no
	// evidence against a destination that is merely busy with this process's bulk
	// work, or that answers a good share of its calls in time (slow or overloaded:
	// the limit contracts).
	if o == breaker.Failure && (e.lim.Busy() || s.cold || e.lim.Answering()) {
		o = breaker.Neutral
	}
	if o == breaker.Failure {
		// A missed deadline, not an error answer: the circuit it opens looks for the
		// recovery continuously (breaker.Permit.CompleteMissed); the limit takes the
		// Failure as a drop.
		e.completeMissed(p, err)
		return o
	}
	e.drop(p)
	return o
}

// drop completes p as a dropped call (breaker.Permit.Drop) and counts it as Neutral.
func (e *entry) drop(p breaker.Permit) bool {
	counted := p.Drop()
	if e.calls != nil {
		e.calls[neutral].Add(1)
		if p.Probe() {
			e.calls[probeNeutral].Add(1)
		}
	}
	return counted
}

// evictable reports whether idle eviction may drop a circuit in state s: closed, with
// no override, nothing in flight, and no failure evidence (a circuit counting
// failures of rare traffic must keep them, or it could never open).
func evictable(s breaker.Snapshot) bool {
	return s.State == breaker.Closed && s.Override == breaker.NoOverride && s.InFlight == 0 &&
		s.Probes == 0 && s.Failures == 0 && s.Limit.InFlight == 0
}

// noAnswer reports whether err says the broker did not answer in time by the client's
// own clock (transport.ErrNoAnswer, or a net timeout).
func noAnswer(err error) bool {
	return errors.Is(err, transport.ErrNoAnswer) || errors.Is(err, os.ErrDeadlineExceeded)
}
