package registry

import (
	"context"
	"errors"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// RejectedError is returned by a guarded publisher when the destination's circuit
// refused the call; the inner publisher was not called. errors.Is(err, breaker.ErrOpen)
// and errors.As(err, **breaker.OpenError) see through it.
type RejectedError struct {
	Destination transport.Destination
	Err         error // *breaker.OpenError, breaker.ErrSaturated or breaker.ErrUnavailable
}

// Error names the destination and the circuit's reason.
func (e *RejectedError) Error() string {
	return "registry: publish to " + e.Destination.String() + " rejected: " + e.Err.Error()
}

// Unwrap returns the circuit's error.
func (e *RejectedError) Unwrap() error { return e.Err }

// Guard returns a Publisher that publishes through pub under the destination's
// circuit. A rejected call returns a *RejectedError without calling pub. Otherwise the
// permit is completed exactly once: Success for a nil error; Neutral when the caller's
// context has ended, whatever the error; Neutral when pub panics (the panic goes on);
// else what classify says. A *transport.BatchError is classified message by message: a
// Failure among them is a Failure, and a batch of which some messages were published
// is otherwise a Success. A nil classify treats every error as a Failure.
func (r *Registry) Guard(pub transport.Publisher, classify transport.Classifier) transport.Publisher {
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

func (g *guarded) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return g.r.Call(ctx, d, len(msgs), g.classify, func(ctx context.Context) error {
		return g.pub.Publish(ctx, d, msgs...)
	})
}

// Acquire takes a permit from destination d's circuit for one call, or returns the
// error a guarded publisher returns instead of calling: the registry's own (an invalid
// destination, the cap), the caller's context error, or the circuit's refusal as a
// *RejectedError. Publishers that complete permits themselves (asynchronous writers)
// use it with Outcome and Complete; the others use Call.
func (r *Registry) Acquire(ctx context.Context, d transport.Destination) (breaker.Permit, error) {
	e, err := r.entry(d)
	if err != nil {
		return breaker.Permit{}, err
	}
	permit, err := e.circuit.Acquire(ctx)
	if err != nil {
		return breaker.Permit{}, e.refused(refusal(ctx, d, err))
	}
	return permit, nil
}

// refusal is what a guarded call returns when the circuit refused: the caller's own
// context error as it is, anything else as a *RejectedError.
func refusal(ctx context.Context, d transport.Destination, err error) error {
	if ctx.Err() != nil && err == ctx.Err() {
		return err
	}
	return &RejectedError{Destination: d, Err: err}
}

// Call makes one call of n messages to d under its circuit, as Guard does: when
// Acquire refuses, call does not run and Call returns Acquire's error; otherwise the
// permit is completed exactly once, with Outcome(ctx, err, n, classify) for what call
// returned, or Neutral when call panics (the panic goes on). A nil classify treats
// every error as a Failure. Adapters that guard their own SDK calls use it.
func (r *Registry) Call(ctx context.Context, d transport.Destination, n int, classify transport.Classifier, call func(context.Context) error) error {
	// Acquire's steps, inline: this is every guarded publish's path.
	e, err := r.entry(d)
	if err != nil {
		return err
	}
	permit, err := e.circuit.Acquire(ctx)
	if err != nil {
		return e.refused(refusal(ctx, d, err))
	}
	completed := false
	defer func() {
		if !completed { // call panicked: that says nothing about the broker
			e.complete(permit, breaker.Neutral)
		}
	}()
	err = call(ctx)
	completed = true
	if classify == nil {
		classify = failAll
	}
	e.complete(permit, Outcome(ctx, err, n, classify))
	return err
}

func failAll(error) breaker.Outcome { return breaker.Failure }

// Outcome is the rule Guard applies to a publish of n messages that returned err; it
// is exported for publishers that complete permits themselves (asynchronous writers).
func Outcome(ctx context.Context, err error, n int, classify transport.Classifier) breaker.Outcome {
	switch {
	case err == nil:
		return breaker.Success
	case ctx.Err() != nil:
		return breaker.Neutral
	}
	var be *transport.BatchError
	if !errors.As(err, &be) {
		return classify(err)
	}
	for _, f := range be.Failed {
		if classify(f.Err) == breaker.Failure {
			return breaker.Failure
		}
	}
	if len(be.Failed) < n {
		return breaker.Success
	}
	return breaker.Neutral
}
