package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Defaults of the Processor's options.
const (
	DefaultBatchSize          = 500
	DefaultLease              = 30 * time.Second
	DefaultPollInterval       = time.Second
	DefaultMaxAttempts        = 10
	DefaultMaxCircuitDeferral = 24 * time.Hour
	DefaultDeferralJitter     = time.Second
	DefaultRejectedDelay      = time.Second
)

// ProcessorOption configures a Processor.
type ProcessorOption func(*Processor) error

// WithHooks has h told what every batch did, per destination.
func WithHooks(h Hooks) ProcessorOption {
	return func(p *Processor) error { p.hooks = h; return nil }
}

// WithClock makes the Processor take every time decision from c: claims, leases,
// backoff, deferrals. Give the registry's circuits the same clock.
func WithClock(c breaker.Clock) ProcessorOption {
	return func(p *Processor) error {
		if c == nil {
			return errors.New("outbox: WithClock(nil)")
		}
		p.clock = c
		return nil
	}
}

// WithRandom sets the source of jitter: f returns a number in [0, 1). The default is
// math/rand/v2.Float64.
func WithRandom(f func() float64) ProcessorOption {
	return func(p *Processor) error {
		if f == nil {
			return errors.New("outbox: WithRandom(nil)")
		}
		p.random = f
		return nil
	}
}

// WithOwner names the Processor in the claim tokens it leases rows under (each token
// adds a random part and a claim number, so owners need not be unique); the default
// is host name and process id.
func WithOwner(owner string) ProcessorOption {
	return func(p *Processor) error {
		if owner == "" {
			return errors.New("outbox: WithOwner: empty owner")
		}
		p.owner = owner
		return nil
	}
}

// WithBatchSize sets how many rows one ProcessPending claims (default 500). A claim
// costs a round trip, a plan and a commit whatever its size, so bigger batches
// spread those over more rows; a batch must still publish well within the lease.
func WithBatchSize(n int) ProcessorOption {
	return positive("WithBatchSize", n, func(p *Processor) { p.batchSize = n })
}

// WithMaxAttempts sets the failed publishes after which a row is dead (default 10).
func WithMaxAttempts(n int) ProcessorOption {
	return positive("WithMaxAttempts", n, func(p *Processor) { p.maxAttempts = n })
}

// WithLease sets how long a claimed batch belongs to this Processor (default 30s). It
// must exceed the time a batch takes to publish: a row whose lease ends may be claimed
// and published by another dispatcher, and this one stops before publishing rows whose
// lease has ended.
func WithLease(d time.Duration) ProcessorOption {
	return positive("WithLease", d, func(p *Processor) { p.lease = d })
}

// WithPollInterval sets how long Run waits after a batch that was not full (default 1s).
func WithPollInterval(d time.Duration) ProcessorOption {
	return positive("WithPollInterval", d, func(p *Processor) { p.poll = d })
}

// WithMaxCircuitDeferral sets the time budget of an outage: once a destination has
// been held for longer than d, its rows enqueued more than d ago are dead with
// ReasonDeferralExhausted (default 24h). A row's attempts are never spent on an
// outage.
func WithMaxCircuitDeferral(d time.Duration) ProcessorOption {
	return positive("WithMaxCircuitDeferral", d, func(p *Processor) { p.maxDeferral = d })
}

// WithDeferralJitter sets the most a hold adds at random to the circuit's NotBefore,
// so that dispatchers do not all come back at the same instant (default 1s; 0 adds
// nothing). One jitter is drawn per hold.
func WithDeferralJitter(d time.Duration) ProcessorOption {
	return func(p *Processor) error {
		if d < 0 {
			return fmt.Errorf("outbox: WithDeferralJitter(%v): negative", d)
		}
		p.deferralJitter = d
		return nil
	}
}

// WithRejectedDelay sets how long a destination is held when it is unavailable
// without an open deadline to wait for: breaker.ErrSaturated (too many calls in
// flight), breaker.ErrUnavailable (a shared circuit's state cannot be read), a
// circuit that could not be created, or an outage failure while the circuit is still
// closed. Its rows consume no attempt (default 1s).
func WithRejectedDelay(d time.Duration) ProcessorOption {
	return positive("WithRejectedDelay", d, func(p *Processor) { p.rejectedDelay = d })
}

// WithProbeBatch sets how many rows of a destination whose hold has ended one claim
// takes as its probe (default 1); the destination's other rows wait until the probe
// has gone out.
func WithProbeBatch(n int) ProcessorOption {
	return positive("WithProbeBatch", n, func(p *Processor) { p.probeBatch = n })
}

// WithClassifier tells the Processor whose fault each publish error is: an outage of
// the broker (breaker.Failure) holds the destination and spends its
// MaxCircuitDeferral time; a destination that is unusable (breaker.Unusable:
// missing, forbidden, misconfigured) is held too, probed after the unusable backoff
// (WithUnusableBackoff), and spends that time as well; any other outcome
// (breaker.Rejected, breaker.Neutral) is the message's own and spends the row's
// attempts. Without it the Processor takes the publisher's classifier
// (transport.Classifying: registry.Guard's publisher and the adapters' have one),
// and NewProcessor fails with ErrNoClassifier when the publisher has none.
func WithClassifier(c transport.Classifier) ProcessorOption {
	return func(p *Processor) error { p.classify = c; return nil }
}

// WithBackoff sets the spacing of retries after failed publishes (default
// DefaultBackoff).
func WithBackoff(b Backoff) ProcessorOption {
	return func(p *Processor) error {
		if err := b.Validate(); err != nil {
			return err
		}
		p.backoff = b
		return nil
	}
}

// WithIDHeader adds to every published message a header with this key and the row's
// id in decimal, so that consumers can drop the duplicates at-least-once delivery
// allows.
func WithIDHeader(key string) ProcessorOption {
	return func(p *Processor) error {
		if key == "" {
			return errors.New("outbox: WithIDHeader: empty key")
		}
		p.idHeader = key
		return nil
	}
}

// WithErrorHandler has Run pass every error of a batch (and of its Waker) to f, from
// Run's goroutine, instead of logging it through log/slog's default logger. Either
// way Run carries on after a backoff (WithErrorBackoff); it never ends on an error.
func WithErrorHandler(f func(error)) ProcessorOption {
	return func(p *Processor) error {
		if f == nil {
			return errors.New("outbox: WithErrorHandler(nil)")
		}
		p.onError = f
		return nil
	}
}

func positive[T int | time.Duration](name string, v T, set func(*Processor)) ProcessorOption {
	return func(p *Processor) error {
		if v <= 0 {
			return fmt.Errorf("outbox: %s(%v): must be positive", name, v)
		}
		set(p)
		return nil
	}
}
