package outbox

import (
	"log/slog"
	"time"
)

// DefaultErrorBackoff spaces Run's batches while they fail: 100ms after the first
// failure, doubling to at most 5s, less up to half of it at random so that the
// dispatchers of a fleet do not come back at the same instant.
var DefaultErrorBackoff = Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.5}

// WithErrorBackoff sets how long Run waits after failed batches (default
// DefaultErrorBackoff): the n-th failure in a row waits b.Delay(n). Keep b.Max short
// beside the store timeout: it is how long a healed database may wait for its
// dispatchers.
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
	hooks, _ := p.hooks.(StoreErrorHooks)
	p.store = boundedStore{inner: p.store, timeout: p.storeTimeout, hooks: hooks}
}
