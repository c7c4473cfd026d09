package natsguard

import (
	"context"
	"sync/atomic"
	"time"

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
	epoch    time.Time
	// answered is when the server last answered a call of this publisher (a PubAck or
	// an API error), in nanoseconds since epoch. A call that timed out while the
	// server answered others says nothing against the connection (connOutcome).
	answered atomic.Int64
}

// ticket is one admitted asynchronous call: its stream permit and connection permit.
type ticket struct {
	d      transport.Destination
	start  registry.Start // for the stream's deadline rule
	cstart registry.Start // for the connection's
	stream registry.Permit
	conn   registry.Permit
	t0     int64 // when the call began, in nanoseconds since epoch
}

// now is the time since the guard's epoch, on the monotonic clock.
func (g *guard) now() int64 { return int64(time.Since(g.epoch)) }

// call makes one synchronous call of n messages to d's stream under the connection's
// circuit and the stream's (registry.Call). The connection is asked first: while it
// refuses, the stream's circuit is not touched and the refusal names the connection.
func (g *guard) call(ctx context.Context, d transport.Destination, n int, send func(context.Context) error) error {
	t0 := g.now()
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
		o = g.connOutcome(ctx, cstart, t0, sendErr)
	}
	completed = true
	g.reg.CompleteWith(g.conn, cp, o, failureErr(o, sendErr))
	return err
}

// begin admits one asynchronous message to d's stream: the connection's permit, then
// the stream's. It returns the refusal (a *registry.RejectedError naming the circuit
// that refused, or the caller's context error) when either refuses.
func (g *guard) begin(ctx context.Context, d transport.Destination) (ticket, error) {
	t := ticket{d: d, t0: g.now(), cstart: g.reg.Start(ctx, g.conn)}
	var err error
	if t.conn, err = g.reg.Acquire(ctx, g.conn); err != nil {
		return ticket{}, err
	}
	t.start = g.reg.Start(ctx, d)
	if t.stream, err = g.reg.Acquire(ctx, d); err != nil {
		g.reg.Complete(g.conn, t.conn, breaker.Neutral)
		return ticket{}, err
	}
	return t, nil
}

// end completes both permits of t for a message whose publish returned err, with the
// registry's deadline rule against ctx, and returns the stream's outcome. Each ticket
// is ended exactly once (by its lane, or by the publish that failed to send it).
func (g *guard) end(ctx context.Context, t *ticket, err error) breaker.Outcome {
	o := g.reg.Finish(ctx, t.d, t.stream, t.start, err, 1, g.classify)
	g.reg.NoteOutcome(t.d, o, err)
	co := g.connOutcome(ctx, t.cstart, t.t0, err)
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

// connOutcome is what a call that began at t0 and returned err says about the
// connection: a Success when the server answered it, whatever the answer (the
// stream's circuit judges that); nothing when the call failed while the server
// answered another call of this publisher after t0 (a hung stream, not a dead
// connection); otherwise the registry's deadline rule, then a Failure for the errors
// Classify calls Failures (the connection is down, closed, or the server did not
// answer in time) and nothing for the rest.
func (g *guard) connOutcome(ctx context.Context, s registry.Start, t0 int64, err error) breaker.Outcome {
	if err == nil || serverAnswered(err) {
		g.markAnswered()
		return breaker.Success
	}
	if g.answered.Load() > t0 {
		return breaker.Neutral
	}
	return registry.Outcome(ctx, s, err, 1, connClassify)
}

// markAnswered records that the server answered a call now. The shared word is
// written at most once a millisecond, so answers on many goroutines do not contend
// on it.
func (g *guard) markAnswered() {
	now := g.now()
	if now-g.answered.Load() > int64(time.Millisecond) {
		g.answered.Store(now)
	}
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
