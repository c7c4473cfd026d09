package sharedstate

import (
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Option sets one of the settings every backend's shared circuits have (the With...
// functions of this package), or, made with DriverOption, one of a backend's own. The
// backends (breaker/redis, breaker/dynamo, breaker/filestate) take them in their
// constructors and read them with Apply.
type Option func(*settings)

// settings is what options write, before Apply checks them.
type settings struct {
	cfg    Config
	prefix string
	errs   []error
	// own are the backend's own options; each reports false when handed another
	// backend's settings.
	own []func(any) (bool, error)
}

func (s *settings) refuse(format string, args ...any) {
	s.errs = append(s.errs, fmt.Errorf(format, args...))
}

// WithClock makes the circuits read the time from clk (tests use a fake clock); nil
// is refused. Every replica writes deadlines from its own clock, so replicas need
// clocks that agree to well within BreakDuration and ProbeLease.
func WithClock(clk breaker.Clock) Option {
	return func(s *settings) {
		if clk == nil {
			s.refuse("WithClock(nil)")
		}
		s.cfg.Clock = clk
	}
}

// WithRandom sets the source of jitter: f returns a number in [0, 1) and must be safe
// for concurrent use; nil is refused. The default is math/rand/v2.Float64.
func WithRandom(f func() float64) Option {
	return func(s *settings) {
		if f == nil {
			s.refuse("WithRandom(nil)")
		}
		s.cfg.Random = f
	}
}

// WithOwner names this replica in the probe leases it takes (default host name,
// process id and a random suffix).
func WithOwner(owner string) Option { return func(s *settings) { s.cfg.Owner = owner } }

// WithMaxStaleness sets how old the process-local snapshot of the record may be and
// still decide an Acquire without reading the store: an OPEN, or an operator's hold,
// written by another replica is seen within this time. 0 reads the record on every
// Acquire; a negative value is refused. Each backend documents its default.
func WithMaxStaleness(d time.Duration) Option {
	return func(s *settings) {
		if d < 0 {
			s.refuse("MaxStaleness must not be negative (got %v)", d)
		}
		s.cfg.MaxStaleness = noneIfZero(d)
	}
}

// WithRetryDelay sets how long the circuit waits after a failed request to the store
// before it tries again; calls in between that need the store are refused at once. 0
// retries at once; a negative value is refused. Each backend documents its default.
func WithRetryDelay(d time.Duration) Option {
	return func(s *settings) {
		if d < 0 {
			s.refuse("RetryDelay must not be negative (got %v)", d)
		}
		s.cfg.RetryDelay = noneIfZero(d)
	}
}

// WithIOTimeout bounds each request to the store (default DefaultIOTimeout), together
// with the caller's context for writes made for an Acquire; it must be positive.
func WithIOTimeout(d time.Duration) Option {
	return func(s *settings) {
		if d <= 0 {
			s.refuse("IOTimeout must be positive (got %v)", d)
		}
		s.cfg.IOTimeout = d
	}
}

// WithObserver adds a function called after every transition this replica writes or
// learns of from the store, outside any lock and in generation order; nil is refused.
// A transition written by another replica carries that replica's reason and time; a
// replica that did not look in between sees several transitions as one.
func WithObserver(f func(breaker.Transition)) Option {
	return func(s *settings) {
		if f == nil {
			s.refuse("WithObserver(nil)")
			return
		}
		s.cfg.Observers = append(s.cfg.Observers, f)
	}
}

// WithErrorHandler is told the errors Permit.Complete cannot return: an outcome or
// transition that could not be written. It is called outside any lock.
func WithErrorHandler(f func(error)) Option { return func(s *settings) { s.cfg.OnError = f } }

// WithStoreFailure says what the circuits do with evidence the store refuses to record
// (a write refused or lost): KeepLocal (the default) counts it in this replica, which
// opens for itself at the threshold and reports itself degraded; FailClosed refuses
// the calls that need the store.
func WithStoreFailure(mode StoreFailure) Option {
	return func(s *settings) {
		if mode != KeepLocal && mode != FailClosed {
			s.refuse("WithStoreFailure(%d): want KeepLocal or FailClosed", mode)
		}
		s.cfg.OnStoreFailure = mode
	}
}

// WithIdentityPrefix puts prefix before the destination in the identities a backend's
// Factory makes ("orders-service/" gives "orders-service/kafka:orders"). A constructor
// given an identity of its own ignores it.
func WithIdentityPrefix(prefix string) Option { return func(s *settings) { s.prefix = prefix } }

// DriverOption returns an Option that sets one of a backend's own settings: set is
// called with the *T the backend passes to Apply, and its error refuses the option.
// Handed to a backend whose settings are of another type, the option is refused.
func DriverOption[T any](set func(*T) error) Option {
	return func(s *settings) {
		s.own = append(s.own, func(v any) (bool, error) {
			t, ok := v.(*T)
			if !ok {
				return false, nil
			}
			return true, set(t)
		})
	}
}

// Apply applies opts, in order, over base (a backend's Config, holding its defaults)
// and over own (the backend's own settings, which its DriverOptions set). It returns
// the resulting Config and the identity prefix. It refuses a nil option, an option
// whose value is out of range, and an option of another backend, naming each.
func Apply[T any](base Config, own *T, opts []Option) (Config, string, error) {
	s := settings{cfg: base}
	for i, opt := range opts {
		if opt == nil {
			s.refuse("option %d is nil", i+1)
			continue
		}
		opt(&s)
	}
	for _, set := range s.own {
		ok, err := set(own)
		if !ok {
			s.refuse("an option of another backend")
		} else if err != nil {
			s.errs = append(s.errs, err)
		}
	}
	return s.cfg, s.prefix, errors.Join(s.errs...)
}

// noneIfZero turns an option's "0: none" into Config's "negative: none" (where 0
// means the default).
func noneIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
