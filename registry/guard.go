package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// RejectedError is returned by a guarded publisher when the destination's circuit or
// its admission control refused the call; the inner publisher was not called.
// errors.Is(err, breaker.ErrOpen) and errors.As(err, **breaker.OpenError) see through
// it, as errors.Is(err, admission.ErrRefused) does for admission control's refusals
// (the adaptive limit's, admission.ErrOverLimit; the throttle's, admission.ErrThrottled).
type RejectedError struct {
	Destination transport.Destination
	Err         error // *breaker.OpenError, breaker.ErrSaturated, breaker.ErrUnavailable, *admission.LimitError or *admission.ThrottleError
}

// Error names the destination and the circuit's reason.
func (e *RejectedError) Error() string {
	return "registry: publish to " + e.Destination.String() + " rejected: " + e.Err.Error()
}

// Unwrap returns the circuit's error.
func (e *RejectedError) Unwrap() error { return e.Err }

// ErrNoMessages is matched (errors.Is) by the error of a publish of no messages, which
// guarded publishers refuse before taking a permit: it would tell the circuit nothing
// about the broker, yet complete as a Success, and after a break it would take the
// probe's place and close the circuit while the broker is still down.
var ErrNoMessages = errors.New("registry: publish of no messages")

// NoMessagesError returns the error of a publish of no messages to d.
func NoMessagesError(d transport.Destination) error {
	return fmt.Errorf("%w to %s: give at least one message", ErrNoMessages, d)
}

// Guard returns a Publisher that publishes through pub under the destination's
// circuit. A publish of no messages fails with ErrNoMessages and a rejected call with
// a *RejectedError, both without calling pub. Otherwise the permit is completed
// exactly once, with Outcome for what pub returned, or Neutral when pub or classify
// panics (the panic goes on). A nil classify treats every error as a Failure.
//
// A publisher that is already guarded (it implements Guarded: what Guard returns,
// and what the adapters' NewPublisher return) is not guarded twice, which would make
// one call take two permits from one circuit and, after a break, wedge it half-open
// (the outer call holds the only probe slot, so the inner one is always refused).
// Guarded by r, it is returned as it is, judged by its own classifier. Guarded by
// another registry, Guard panics, naming the fix: a call is judged by one circuit,
// so build the publisher with the registry that should guard it.
func (r *Registry) Guard(pub transport.Publisher, classify transport.Classifier) transport.Publisher {
	if g, ok := pub.(Guarded); ok {
		return r.alreadyGuarded(g)
	}
	if classify == nil {
		classify = failAll
	}
	return &guarded{r: r, pub: pub, classify: classify}
}

type guarded struct {
	r        *Registry
	pub      transport.Publisher
	classify transport.Classifier
}

// Classifier returns the classifier the publisher was guarded with (every error a
// Failure when Guard was given none), so that code keeping messages for it (the
// outbox) judges errors as its circuits do. It implements transport.Classifying.
func (g *guarded) Classifier() transport.Classifier { return g.classify }

// GuardedBy returns the registry whose circuits guard the publisher.
func (g *guarded) GuardedBy() *Registry { return g.r }

func (g *guarded) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return g.r.Call(ctx, d, len(msgs), g.classify, func(ctx context.Context) error {
		return g.pub.Publish(ctx, d, msgs...)
	})
}

// refusal is what a guarded call returns when the circuit refused: the caller's own
// context error as it is, anything else as a *RejectedError.
func refusal(ctx context.Context, d transport.Destination, err error) error {
	if ctx.Err() != nil && err == ctx.Err() {
		return err
	}
	return &RejectedError{Destination: d, Err: err}
}

// Call makes one call of n messages to d under its circuit and admission control, as
// Guard does: it returns the registry's error for a destination it refuses, an error
// matching ErrNoMessages when n is not positive, or Acquire's error when the circuit
// or admission control refuses, in each case without taking a permit or running
// call; otherwise the permit is completed exactly once, with Outcome for what call
// returned (and the deadline rule, see Outcome), or Neutral when call or classify
// panics (the panic goes on). A nil classify treats every error as a Failure.
// Adapters that guard their own SDK calls use it.
func (r *Registry) Call(ctx context.Context, d transport.Destination, n int, classify transport.Classifier, call func(context.Context) error) error {
	return r.CallHeld(ctx, d, n, 0, classify, call)
}

// CallHeld is Call for an SDK that may hold the call's messages for up to hold on the
// client before the broker sees them, as kafka-go's Writer does for its BatchTimeout:
// a deadline that passes during the hold says nothing about the broker, so the
// deadline rule counts it as a Failure only for a call that started with its
// MinCallBudget beyond hold.
func (r *Registry) CallHeld(ctx context.Context, d transport.Destination, n int, hold time.Duration, classify transport.Classifier, call func(context.Context) error) error {
	// Acquire's steps, inline: this is every guarded publish's path.
	e, err := r.entry(d)
	if err != nil {
		return err
	}
	if n <= 0 {
		return NoMessagesError(d)
	}
	start := startOf(ctx, e.minBudget+hold)
	start.cold = e.adm != nil && e.adm.Cold()
	permit, err := e.acquire(ctx, n)
	if err != nil {
		return e.refused(refusal(ctx, d, err))
	}
	completed := false
	defer func() {
		if !completed { // call or classify panicked: that says nothing about the broker
			e.complete(permit, breaker.Neutral, nil)
		}
	}()
	err = call(ctx)
	if classify == nil {
		classify = failAll
	}
	o := Outcome(ctx, start, err, n, classify)
	completed = true
	o = e.settle(ctx, permit, o, start, err, n)
	e.note(o, err, r)
	return err
}

// Start is what the deadline rule of Outcome must know about a call's start: whether
// the caller's context left the call its destination's MinCallBudget. The zero Start
// is that of a call that had its budget (or no deadline at all).
//
// A call that starts with less than its budget is still made, not refused: the budget
// decides what a deadline proves about the broker, not whether the call may run, and
// refusing would turn a healthy broker's millisecond answers into errors for callers
// whose deadlines are tight but sufficient. Such a call holds its permit no longer
// than its own short deadline.
type Start struct {
	short bool // the context's deadline was nearer than the budget
	cold  bool // the destination's admission control had seen no call end yet (limit.go)
}

// Start records, for a call to d that starts now under ctx, what Outcome needs to
// judge a deadline that ends the call. It reads the clock only when ctx has a
// deadline.
func (r *Registry) Start(ctx context.Context, d transport.Destination) Start {
	if _, ok := ctx.Deadline(); !ok {
		return Start{}
	}
	return startOf(ctx, r.Policy(d).minCallBudget())
}

func startOf(ctx context.Context, budget time.Duration) Start {
	deadline, ok := ctx.Deadline()
	return Start{short: ok && time.Until(deadline) < budget}
}

func failAll(error) breaker.Outcome { return breaker.Failure }

// endedBy is ctx.Err() for a call that returned err, also when the context's deadline
// has passed and its cancellation has not run yet: an SDK that sets its connection's
// deadline to the context's returns its own timeout (an i/o timeout) at the same
// instant, and may return before the context's timer fires. Without this, that call
// would be judged by the client's timeout (a missed deadline with its budget) even
// when it started with less than MinCallBudget: the caller's own deadline held against
// the broker. It reads the clock only for a failed call whose context has a deadline
// and has not ended.
func endedBy(ctx context.Context, err error) error {
	ended := ctx.Err()
	if ended != nil || err == nil {
		return ended
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Outcome is the rule Guard applies to a publish of n messages that returned err,
// given the call's Start; it is exported for publishers that complete permits
// themselves (asynchronous writers). In order:
//
//   - a nil error is a Success;
//   - when ctx was cancelled (not by its deadline), the caller gave up: Neutral,
//     whatever the error;
//   - when ctx's deadline passed, the call was ended by it: a Failure when the call
//     started with its MinCallBudget (the broker had a fair chance and did not
//     answer), else Neutral (the deadline was too short to be a verdict);
//   - a *transport.BatchError is classified message by message: a Failure among them
//     is a Failure, and a batch of which some messages were published is otherwise a
//     Success; a batch of which none was published is Unusable when every message
//     was, else Rejected when one was, else Neutral;
//   - any other error is what classify says.
//
// Guarded calls (Call, CallHeld, CallPartitioned, Finish) apply the same deadline
// rule to admission control: a call that started with less than MinCallBudget and
// was ended by its deadline is Ignored by it, neither a drop nor a deadline to learn.
// A missed deadline that counts is a Failure the circuit knows for one
// (breaker.Permit.CompleteMissed), as is an error saying that the client's own
// timeout gave up on the broker (transport.ErrNoAnswer, a net timeout).
//
// When the destination's admission control is on (Policy.Admission), guarded calls
// also tell a busy or slow destination from a sick one. Every call with its budget
// ended by its deadline, but for the set-up case below, is reported to the limit as
// Dropped, so the limit contracts, and its Failure is made Neutral when
//
//   - the destination answers a good share of its calls in time
//     (admission.Limiter.Answering: a success within the last second, and at least a
//     quarter of the last window's calls succeeded): it is slow or overloaded, and
//     the limit is the remedy;
//   - it is busy with this process's own bulk work (admission.Limiter.Busy: bulk
//     messages in flight or just finished, and a success within the last second);
//   - the call belongs to the first wave of a cold process (admitted before any call
//     to the destination had completed, with another call in flight beside it:
//     connections being opened, a client warming up). A broker hung from the start
//     opens its circuit one wave later; a call alone is judged at once.
//
// A call that ended before its messages were sent (transport.ErrNotSent: a channel
// or connection still being set up) while the destination answered another call
// within the last second is Neutral and no drop: it gave the broker no work, and the
// set-up goes on and serves a later call (a slow broker makes a channel's opening,
// two round trips, miss deadlines that publishes on open channels meet).
//
// A hung broker answers nothing, is never busy, and opens its circuit as before,
// once a window of the limit has closed on its misses.
func Outcome(ctx context.Context, s Start, err error, n int, classify transport.Classifier) breaker.Outcome {
	switch ended := endedBy(ctx, err); {
	case err == nil:
		return breaker.Success
	case ended == nil:
	case s.short || !errors.Is(ended, context.DeadlineExceeded):
		return breaker.Neutral
	default:
		return breaker.Failure
	}
	var be *transport.BatchError
	if !errors.As(err, &be) {
		return classify(err)
	}
	unusable, rejected := 0, false
	for _, f := range be.Failed {
		switch classify(f.Err) {
		case breaker.Failure:
			return breaker.Failure
		case breaker.Unusable:
			unusable++
		case breaker.Rejected:
			rejected = true
		}
	}
	switch {
	case len(be.Failed) < n:
		return breaker.Success
	case unusable == len(be.Failed):
		return breaker.Unusable
	case rejected:
		return breaker.Rejected
	}
	return breaker.Neutral
}
