package outbox

import (
	"context"
	"errors"
)

// Waker tells a Processor that rows may have become due, so that Run claims at once
// instead of waiting out its poll interval. outbox/postgres's Listener is one: it
// LISTENs for the NOTIFY that Enqueue sends on commit.
type Waker interface {
	// Listen runs until ctx ends and calls wake whenever rows may have become due.
	// wake never blocks and may be called any number of times: the Processor
	// coalesces the calls, so a burst of commits costs one claim. Listen should also
	// call wake each time it starts listening again after a break, since rows
	// committed while it was not listening sent no signal it could see. It returns
	// when ctx ends, or earlier with an error if it cannot listen at all; either way
	// Run keeps polling.
	Listen(ctx context.Context, wake func()) error
}

// WithWaker has Run start w.Listen in a goroutine of its own, stopped before Run
// returns, and claim as soon as w signals. Polling carries on at the poll interval
// as the safety net for signals that were lost. An error Listen returns goes to Run's
// error handler (WithErrorHandler, or the log/slog default), from Run's goroutine;
// Run keeps polling. Without WithWaker, a store that is a CommitWaker gives its own.
func WithWaker(w Waker) ProcessorOption {
	return func(p *Processor) error {
		if w == nil {
			return errors.New("outbox: WithWaker(nil)")
		}
		p.waker = w
		return nil
	}
}

// waker is a running Waker: its signals, at most one waiting (that is the
// coalescing), and the error it stopped with. Both channels are nil when the
// Processor has no Waker, so they never receive.
type waker struct {
	wake   <-chan struct{}
	failed <-chan error
	stop   func()
}

// startWaker runs the Waker, if any, until stop is called.
func (p *Processor) startWaker(ctx context.Context) waker {
	if p.waker == nil {
		return waker{stop: func() {}}
	}
	wake, failed := make(chan struct{}, 1), make(chan error, 1)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := p.waker.Listen(lctx, func() {
			select {
			case wake <- struct{}{}:
			default: // a signal is already waiting: this one adds nothing
			}
		})
		if err != nil && lctx.Err() == nil {
			failed <- err
		}
	}()
	return waker{wake: wake, failed: failed, stop: func() { cancel(); <-done }}
}

// drain takes a waiting signal, if any: the claim about to be made sees every row it
// announced.
func drain(wake <-chan struct{}) {
	select {
	case <-wake:
	default:
	}
}
