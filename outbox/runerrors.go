package outbox

import (
	"context"
	"log/slog"
	"time"
)

// DefaultErrorBackoff spaces Run's batches while they fail: 100ms after the first
// failure, doubling to at most 5s, less up to half of it at random so that the
// dispatchers of a fleet do not come back at the same instant.
var DefaultErrorBackoff = Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.5}

// WithErrorBackoff sets how long Run waits after failed batches (default
// DefaultErrorBackoff): the n-th failure in a row waits b's n-th retry wait. Keep
// b.Max short beside the store timeout: it is how long a healed database may wait
// for its dispatchers.
func WithErrorBackoff(b Backoff) ProcessorOption {
	return func(p *Processor) error {
		if err := b.Validate(); err != nil {
			return err
		}
		p.errorBackoff = b
		return nil
	}
}

// logError is Run's error handler unless WithErrorHandler gives one.
func logError(err error) {
	slog.Default().Error("brokerguard outbox: dispatch failed; Run retries after a backoff", "err", err)
}

// CommitWaker is an optional interface of a Store that can wake a Processor when rows
// are committed (outbox/postgres's Store, through LISTEN on its own pool). A
// Processor given no WithWaker uses the store's CommitWaker, when it returns one
// (nil: the store cannot, or was told not to), and polls as the safety net.
type CommitWaker interface {
	CommitWaker() Waker
}

// bindStore wraps the store in its deadlines and error counting, and takes the
// store's own Waker when none was given. It runs once, at the end of NewProcessor.
func (p *Processor) bindStore() {
	if p.storeTimeout == 0 {
		p.storeTimeout = max(p.lease/3, 1)
	}
	if p.waker == nil {
		if cw, ok := p.store.(CommitWaker); ok {
			p.waker = cw.CommitWaker()
		}
	}
	p.sessions, _ = p.store.(Sessions)
	hooks, _ := p.hooks.(StoreErrorHooks)
	p.store = boundedStore{inner: p.store, timeout: p.storeTimeout, hooks: hooks}
}

// maxUnreleased bounds the tokens Run keeps to release again: past it the oldest
// one's rows wait for their lease to end instead.
const maxUnreleased = 64

// releaseAgain retries the releases that failed after failed batches, so that a
// batch cut short by a store outage comes back as soon as the store answers rather
// than when its lease ends. It returns the tokens still not released.
func (p *Processor) releaseAgain(ctx context.Context, tokens []string, release func(string) error) []string {
	if len(tokens) > maxUnreleased {
		tokens = tokens[len(tokens)-maxUnreleased:]
	}
	for i, tok := range tokens {
		if ctx.Err() != nil || release(tok) != nil {
			return tokens[i:]
		}
	}
	return nil
}

// releaseAll tries once more, as Run stops, to release the tokens, until one fails:
// the store is still down, and the rest wait for their leases to end.
func (p *Processor) releaseAll(tokens []string, release func(string) error) error {
	for _, tok := range tokens {
		if err := release(tok); err != nil {
			return err
		}
	}
	return nil
}
