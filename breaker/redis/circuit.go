package redisstate

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/transport"
)

// Defaults of the circuit options.
const (
	DefaultMaxStateStaleness = sharedstate.DefaultMaxStaleness
	DefaultBackendRetryDelay = sharedstate.DefaultRetryDelay
	DefaultIOTimeout         = sharedstate.DefaultIOTimeout
)

// Option configures a Circuit or a Driver (which uses only WithKeyPrefix and WithTTL).
type Option func(*options)

type options struct {
	cfg                              sharedstate.Config
	staleness, retryDelay, ioTimeout time.Duration
	keyPrefix, idPrefix              string
	ttl                              time.Duration
	nilClock, nilRandom              bool
}

// WithKeyPrefix puts prefix before every key (default "brokerguard:circuit:"), so that
// several services or environments can share one Redis. The identity follows in a hash
// tag: "brokerguard:circuit:{kafka:orders}".
func WithKeyPrefix(prefix string) Option { return func(o *options) { o.keyPrefix = prefix } }

// WithTTL sets how long a circuit's key lives after it was last read or written
// (default 24 hours), so that circuits nobody uses any more disappear. A key never
// expires before an open deadline, an operator's hold or a probe lease it holds has
// passed by this much. A circuit whose key expired starts closed, in a new generation.
func WithTTL(ttl time.Duration) Option { return func(o *options) { o.ttl = ttl } }

// WithIdentityPrefix puts prefix before the destination in the identities Factory
// makes ("orders-service/" gives "orders-service/kafka:orders"). New ignores it.
func WithIdentityPrefix(prefix string) Option { return func(o *options) { o.idPrefix = prefix } }

// WithMaxStateStaleness sets how old the process-local snapshot of the record may be
// before the circuit stops deciding on it (default one second). An OPEN, or an
// override, written by another replica is seen within this time.
func WithMaxStateStaleness(d time.Duration) Option { return func(o *options) { o.staleness = d } }

// WithBackendRetryDelay sets how long the circuit waits after a failed request to
// Redis before it tries again (default one second). Calls in between that need Redis
// are refused at once.
func WithBackendRetryDelay(d time.Duration) Option { return func(o *options) { o.retryDelay = d } }

// WithIOTimeout bounds each script the circuit runs (default two seconds), together
// with the caller's context for writes made for an Acquire. Set the client's own
// timeouts no longer than this.
func WithIOTimeout(d time.Duration) Option { return func(o *options) { o.ioTimeout = d } }

// WithClock makes the circuit read time from clk (tests use a fake clock). Every
// replica writes deadlines from its own clock, so replicas need clocks that agree to
// well within BreakDuration and ProbeLease.
func WithClock(clk breaker.Clock) Option {
	return func(o *options) { o.cfg.Clock, o.nilClock = clk, clk == nil }
}

// WithOwner names this replica in the probe leases it takes (default host name,
// process id and a random suffix).
func WithOwner(owner string) Option { return func(o *options) { o.cfg.Owner = owner } }

// WithRandom sets the source of jitter: f returns a number in [0, 1) and must be safe
// for concurrent use. The default is math/rand/v2.Float64; New refuses nil.
func WithRandom(f func() float64) Option {
	return func(o *options) { o.cfg.Random, o.nilRandom = f, f == nil }
}

// WithObserver adds a function called after every transition this replica writes or
// learns of from Redis, outside any lock and in generation order. A transition
// written by another replica carries that replica's reason and time.
func WithObserver(f func(breaker.Transition)) Option {
	return func(o *options) { o.cfg.Observers = append(o.cfg.Observers, f) }
}

// WithErrorHandler is told the errors Permit.Complete cannot return: an outcome or
// transition that could not be written.
func WithErrorHandler(f func(error)) Option { return func(o *options) { o.cfg.OnError = f } }

// Circuit is a circuit breaker whose state lives in one Redis hash, shared by every
// replica that uses the same Redis, key prefix and identity (scope SharedDependency).
// The state machine is sharedstate.Circuit's; this package keeps the record. It is
// safe for concurrent use and starts no goroutine. Create it with New or Factory.
type Circuit struct {
	*sharedstate.Circuit
	key string
}

var _ breaker.Circuit = (*Circuit)(nil)

// New returns the shared circuit identity, kept by client (made with
// ContextTimeoutEnabled: true, as NewDriver requires). The policy must be valid,
// have scope SharedDependency and count consecutive failures (FailureWindow 0). New
// does no I/O; the first Acquire (or Refresh) reads the record, creating it when it
// is missing.
func New(client redis.Scripter, identity string, p breaker.Policy, opts ...Option) (*Circuit, error) {
	o := collect(opts)
	d, err := newDriver(client, o)
	if err != nil {
		return nil, err
	}
	key := d.Key(identity)
	switch {
	case identity == "":
		return nil, errors.New("redisstate: New: empty identity")
	case p.Scope != breaker.SharedDependency && p.Validate() == nil:
		return nil, fmt.Errorf("redisstate: circuit %q: %w", identity, &breaker.PolicyError{
			Field: "Scope", Reason: "is " + p.Scope.String() + "; breaker/redis provides only SHARED_DEPENDENCY (use breaker.New for a local circuit)"})
	case o.staleness <= 0:
		return nil, fmt.Errorf("redisstate: circuit %q: MaxStateStaleness must be positive (got %v)", identity, o.staleness)
	case o.retryDelay < 0:
		return nil, fmt.Errorf("redisstate: circuit %q: BackendRetryDelay must not be negative (got %v)", identity, o.retryDelay)
	case o.ioTimeout <= 0:
		return nil, fmt.Errorf("redisstate: circuit %q: IOTimeout must be positive (got %v)", identity, o.ioTimeout)
	case o.nilClock:
		return nil, fmt.Errorf("redisstate: circuit %q: WithClock(nil)", identity)
	case o.nilRandom:
		return nil, fmt.Errorf("redisstate: circuit %q: WithRandom(nil)", identity)
	}
	o.cfg.Identity, o.cfg.Policy, o.cfg.Scope, o.cfg.Driver = identity, p, breaker.SharedDependency, d
	o.cfg.Unavailable = func(err error) error { return &UnavailableError{Identity: identity, Key: key, Err: err} }
	// The engine reads a zero as "the default" and a negative delay as "none".
	o.cfg.MaxStaleness, o.cfg.RetryDelay, o.cfg.IOTimeout = o.staleness, cmp.Or(o.retryDelay, -1), o.ioTimeout
	c, err := sharedstate.New(o.cfg)
	if err != nil {
		return nil, fmt.Errorf("redisstate: %w", err)
	}
	return &Circuit{Circuit: c, key: key}, nil
}

// Factory returns a factory for registry.WithCircuitFactory that makes a shared
// circuit per destination, with the destination's String() (after
// WithIdentityPrefix's prefix) as its identity:
//
//	reg, err := registry.New(policy, registry.WithCircuitFactory(breaker.SharedDependency,
//		redisstate.Factory(client, redisstate.WithIdentityPrefix("billing/"))))
func Factory(client redis.Scripter, opts ...Option) func(transport.Destination, breaker.Policy) (breaker.Circuit, error) {
	prefix := collect(opts).idPrefix
	return func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
		return New(client, prefix+d.String(), p, opts...)
	}
}

// Key returns the Redis key that holds the circuit's record.
func (c *Circuit) Key() string { return c.key }

func collect(opts []Option) options {
	o := options{
		staleness: DefaultMaxStateStaleness, retryDelay: DefaultBackendRetryDelay, ioTimeout: DefaultIOTimeout,
		keyPrefix: DefaultKeyPrefix, ttl: DefaultTTL,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
