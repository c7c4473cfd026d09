package natsguard

import (
	"context"
	"sync/atomic"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// This file holds every call the package makes to the registry, so that a change of
// the registry's call API changes this file alone.

// guard takes and completes the permits of a Publisher's calls: the stream's circuit
// and the connection's.
type guard struct {
	reg      *registry.Registry
	conn     transport.Destination // the connection circuit's destination
	classify transport.Classifier
	// answers counts the calls of this publisher the server answered (a PubAck or an
	// API error). A call that failed after the count moved past the one it began with
	// failed while the server answered others: nothing against the connection
	// (connOutcome). A count rather than a time: no clock is read per call.
	answers atomic.Uint64
}

// ticket is one admitted asynchronous call: its stream permit and connection permit.
type ticket struct {
	d      transport.Destination
	start  registry.Start // for the stream's deadline rule
	cstart registry.Start // for the connection's
	stream registry.Permit
	conn   registry.Permit
	seen   uint64 // answers when the call began
}

// call makes one synchronous call of n messages to d's stream under the connection's
// circuit and the stream's (registry.Call). The connection is asked first: while it
// refuses, the stream's circuit is not touched and the refusal names the connection.
func (g *guard) call(ctx context.Context, d transport.Destination, n int, send func(context.Context) error) error {
	seen := g.answers.Load()
	cstart := g.reg.Start(ctx, g.conn)
	cp, err := g.reg.Acquire(ctx, g.conn)
	if err != nil {
		return err
	}
	var sent bool
	var sendErr error
	completed := false
	defer func() {
		if !completed { // send or the classifier panicked: that says nothing about the connection
			g.reg.Complete(g.conn, cp, breaker.Neutral)
		}
	}()
	err = g.reg.Call(ctx, d, n, g.classify, func(ctx context.Context) error {
		sent = true
		sendErr = send(ctx)
		return sendErr
	})
	o := breaker.Neutral
	if sent {
		o = g.connOutcome(ctx, cstart, seen, sendErr)
	}
	completed = true
	g.reg.CompleteWith(g.conn, cp, o, failureErr(o, sendErr))
	return err
}

// begin admits one asynchronous message to d's stream into t: the connection's
// permit, then the stream's. It returns the refusal (a *registry.RejectedError
// naming the circuit that refused, or the caller's context error) when either
// refuses, and then t holds no permit.
func (g *guard) begin(ctx context.Context, d transport.Destination, t *ticket) error {
	t.d, t.seen, t.cstart = d, g.answers.Load(), g.reg.Start(ctx, g.conn)
	var err error
	if t.conn, err = g.reg.Acquire(ctx, g.conn); err != nil {
		return err
	}
	t.start = g.reg.Start(ctx, d)
	if t.stream, err = g.reg.Acquire(ctx, d); err != nil {
		g.reg.Complete(g.conn, t.conn, breaker.Neutral)
		return err
	}
	return nil
}

// end completes both permits of t for a message whose publish returned err, with the
// registry's deadline rule against ctx, and returns the stream's outcome. Each ticket
// is ended exactly once (by its lane, or by the publish that failed to send it).
func (g *guard) end(ctx context.Context, t *ticket, err error) breaker.Outcome {
	o := g.reg.Finish(ctx, t.d, t.stream, t.start, err, 1, g.classify)
	g.reg.NoteOutcome(t.d, o, err)
	co := g.connOutcome(ctx, t.cstart, t.seen, err)
	g.reg.CompleteWith(g.conn, t.conn, co, failureErr(co, err))
	return o
}

// drop completes both permits of t as Neutral: the publisher gave the message up
// (Close) before its answer came, or never sent it for want of room among the
// pending acks, which says nothing about the server.
func (g *guard) drop(t *ticket) {
	g.reg.Complete(t.d, t.stream, breaker.Neutral)
	g.reg.Complete(g.conn, t.conn, breaker.Neutral)
}

// connOutcome is what a call that began when the server had answered seen calls,
// and returned err, says about the connection: a Success when the server answered
// it, whatever the answer (the stream's circuit judges that); nothing when the call
// failed while the server answered another call of this publisher after it began (a
// hung stream, not a dead connection); otherwise the registry's deadline rule, then
// a Failure for the errors Classify calls Failures (the connection is down, closed,
// or the server did not answer in time) and nothing for the rest.
func (g *guard) connOutcome(ctx context.Context, s registry.Start, seen uint64, err error) breaker.Outcome {
	if err == nil || serverAnswered(err) {
		g.answers.Add(1)
		return breaker.Success
	}
	if g.answers.Load() != seen {
		return breaker.Neutral
	}
	return registry.Outcome(ctx, s, err, 1, connClassify)
}

// connClassify is the connection's classifier: Classify's Failures are the
// connection's (errors the server answered were taken out before); the rest say
// nothing about it.
func connClassify(err error) breaker.Outcome {
	if Classify(err) == breaker.Failure {
		return breaker.Failure
	}
	return breaker.Neutral
}

// failureErr is err when o is a Failure (the circuit shows it as its last error), else
// nil.
func failureErr(o breaker.Outcome, err error) error {
	if o == breaker.Failure {
		return err
	}
	return nil
}

// GuardedBy returns the registry whose circuits guard the publisher, so that
// registry.Guard recognises it as already guarded (see registry.Guarded).
func (p *Publisher) GuardedBy() *registry.Registry { return p.g.reg }

var (
	_ registry.Guarded      = (*Publisher)(nil)
	_ transport.Publisher   = (*Publisher)(nil)
	_ transport.Classifying = (*Publisher)(nil)
)
