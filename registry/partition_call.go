package registry

import (
	"context"
	"errors"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// PartitionedCall is one call of N messages to a destination whose messages are bound
// for partitions, for CallPartitioned.
type PartitionedCall struct {
	N int
	// Hold is what CallHeld's hold is: how long the client may keep the messages
	// before the broker sees them.
	Hold     time.Duration
	Classify transport.Classifier
	// Route runs once the destination's circuit admitted the call. It fills parts
	// (len N, preset to -1: not known) with each message's partition where it knows
	// it, and returns the refusals of the messages bound for isolated partitions
	// (refused[i] non-nil, from Partitions.Admit or Route); a nil slice refuses
	// none. ps is never nil. Route may be nil: partitions are then learnt by Send.
	Route func(ps *Partitions, parts []int) (refused []error)
	// Send sends the admitted messages, idx being their positions among the N, and may
	// set parts[i] for a message it routed itself. It returns nil, a
	// *transport.BatchError whose indexes are positions in idx, or an error for all.
	Send func(ctx context.Context, idx []int, parts []int) error
}

// CallPartitioned makes c under d's circuit and the evidence of d's partitions (see
// Partitions): after the circuit admits the call, c.Route refuses the messages bound
// for isolated partitions and c.Send sends the others. Each partition the call
// reached is told the outcome of its messages, and the circuit is told the call's
// outcome (Outcome's rule) except that a Failure of known partitions counts against
// the destination only when Partitions.TopicOutcome says so (no other partition answering).
//
// It returns nil when every message was sent; a *PartitionRejectedError when the
// only message was refused; a *transport.BatchError, indexed by position among the
// N messages, when some were refused or failed (refused ones have a
// *PartitionRejectedError); Send's own error when it failed for all and none was
// refused; and Call's errors before any of this. Without partition evidence
// (PartitionPolicy.Disabled) it is CallHeld over Send.
func (r *Registry) CallPartitioned(ctx context.Context, d transport.Destination, c PartitionedCall) error {
	e, err := r.entry(d)
	if err != nil {
		return err
	}
	if c.N <= 0 {
		return NoMessagesError(d)
	}
	base := c.Classify
	if base == nil {
		base = failAll
	}
	// A partition's refusal made inside Send (a client's partitioner) is no verdict.
	classify := func(err error) breaker.Outcome {
		if IsPartitionRejection(err) {
			return breaker.Neutral
		}
		return base(err)
	}
	ps, err := r.Partitions(d)
	if err != nil {
		return err
	}
	if ps == nil {
		return r.CallHeld(ctx, d, c.N, c.Hold, classify, func(ctx context.Context) error {
			return c.Send(ctx, allIndexes(c.N), make([]int, c.N))
		})
	}
	start := startOf(ctx, e.minBudget+c.Hold)
	start.cold = e.adm != nil && e.adm.Cold()
	permit, err := e.acquire(ctx, c.N) // weighed by its messages when admission control is on
	if err != nil {
		return e.refused(refusal(ctx, d, err))
	}
	parts := make([]int, c.N)
	for i := range parts {
		parts[i] = -1
	}
	completed := false
	defer func() {
		if !completed { // Route, Send or classify panicked: that says nothing
			for _, p := range parts {
				if p >= 0 {
					ps.Complete(p, breaker.Neutral) // frees a probe's place
				}
			}
			e.complete(permit, breaker.Neutral, nil)
		}
	}()
	var refused []error
	if c.Route != nil {
		refused = c.Route(ps, parts)
	}
	idx := allIndexes(c.N)
	if refused != nil {
		idx = idx[:0]
		for i, err := range refused {
			if err == nil {
				idx = append(idx, i)
			}
		}
	}
	var sendErr error
	if len(idx) > 0 {
		sendErr = c.Send(ctx, idx, parts)
	}
	// Each message's error, by position among the N; nil when all went out.
	var errs []error
	be, isBatch := errors.AsType[*transport.BatchError](sendErr)
	switch {
	case sendErr != nil && !isBatch:
		errs = make([]error, c.N)
		for _, i := range idx {
			errs[i] = sendErr
		}
	case isBatch:
		errs = make([]error, c.N)
		for _, f := range be.Failed {
			if f.Index >= 0 && f.Index < len(idx) {
				errs[idx[f.Index]] = f.Err
			}
		}
	case refused != nil:
		errs = make([]error, c.N)
	}
	for i, err := range refused {
		if err != nil {
			errs[i] = err
		}
	}
	o := breaker.Success
	if sendErr != nil {
		o = Outcome(ctx, start, sendErr, len(idx), classify)
	}
	// Each partition reached is told its messages' outcome once: a Failure among
	// them is a Failure, else a Success among them a Success.
	published, attributed := false, true
	var one [1]partOutcome
	told := one[:0]
	for _, i := range idx {
		mo := breaker.Success
		if errs != nil && errs[i] != nil {
			mo = Outcome(ctx, start, errs[i], 1, classify)
		} else {
			published = true
		}
		p := parts[i]
		if p < 0 {
			attributed = attributed && mo != breaker.Failure
			continue
		}
		told = addOutcome(told, p, mo, errAt(errs, i))
	}
	for _, t := range told {
		ps.CompleteWith(t.p, t.o, t.err)
	}
	if o == breaker.Failure && attributed && len(idx) > 0 {
		var fb [4]int
		failing := fb[:0]
		for _, t := range told {
			if t.o == breaker.Failure {
				failing = append(failing, t.p)
			}
		}
		o = ps.TopicOutcome(o, published, failing...)
	}
	if len(idx) == 0 {
		o = breaker.Neutral
	}
	completed = true
	o = e.settle(ctx, permit, o, start, sendErr, c.N)
	e.note(o, sendErr, r)
	switch {
	case errs == nil:
		return nil
	case refused == nil && !isBatch:
		return sendErr
	case c.N == 1:
		return errs[0]
	}
	out := &transport.BatchError{Destination: d}
	for i, err := range errs {
		if err != nil {
			out.Failed = append(out.Failed, transport.MessageError{Index: i, Err: err})
		}
	}
	return out
}

type partOutcome struct {
	p   int
	o   breaker.Outcome
	err error // a failed message's error, kept as the partition's last error
}

// addOutcome folds outcome o of a message bound for p, which failed with err, into told.
func addOutcome(told []partOutcome, p int, o breaker.Outcome, err error) []partOutcome {
	for i := range told {
		if told[i].p == p {
			switch {
			case o == breaker.Failure, o == breaker.Success && told[i].o == breaker.Neutral:
				told[i].o, told[i].err = o, err
			}
			return told
		}
	}
	return append(told, partOutcome{p, o, err})
}

// errAt is errs[i], nil when errs is.
func errAt(errs []error, i int) error {
	if errs == nil {
		return nil
	}
	return errs[i]
}

func allIndexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}
