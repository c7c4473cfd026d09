package redisstate

import (
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/transport"
)

// Option configures a Circuit or a Driver: the options every shared backend takes
// (sharedstate.WithClock, WithMaxStaleness, WithIOTimeout, ...), and this package's
// WithKeyPrefix and WithTTL, the only ones a Driver reads. Here the snapshot's
// MaxStaleness and the RetryDelay after a failed request default to one second, and
// IOTimeout bounds each script; set the client's own timeouts no longer than it.
type Option = sharedstate.Option

// keyOptions are this package's own settings.
type keyOptions struct {
	prefix string
	ttl    time.Duration
}

// WithKeyPrefix puts prefix before every key (default "brokerguard:circuit:"), so that
// several services or environments can share one Redis. The identity follows in a hash
// tag: "brokerguard:circuit:{kafka:orders}".
func WithKeyPrefix(prefix string) Option {
	return sharedstate.DriverOption(func(k *keyOptions) error { k.prefix = prefix; return nil })
}

// WithTTL sets how long a circuit's key lives after it was last read or written
// (default 24 hours, at least one second), so that circuits nobody uses any more
// disappear. A key never expires before an open deadline, an operator's hold or a
// probe lease it holds has passed by this much. A circuit whose key expired starts
// closed, in a new generation.
func WithTTL(ttl time.Duration) Option {
	return sharedstate.DriverOption(func(k *keyOptions) error {
		if ttl < time.Second {
			return fmt.Errorf("TTL must be at least one second (got %v)", ttl)
		}
		k.ttl = ttl
		return nil
	})
}

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
	if identity == "" {
		return nil, errors.New("redisstate: New: empty identity")
	}
	cfg, _, keys, err := apply(opts)
	if err != nil {
		return nil, fmt.Errorf("redisstate: circuit %q: %w", identity, err)
	}
	d, err := newDriver(client, keys)
	if err != nil {
		return nil, err
	}
	key := d.Key(identity)
	cfg.Identity, cfg.Policy, cfg.Scope, cfg.Driver = identity, p, breaker.SharedDependency, d
	cfg.Unavailable = func(err error) error { return &UnavailableError{Identity: identity, Key: key, Err: err} }
	c, err := sharedstate.New(cfg)
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
//		redisstate.Factory(client, sharedstate.WithIdentityPrefix("billing/"))))
func Factory(client redis.Scripter, opts ...Option) func(transport.Destination, breaker.Policy) (breaker.Circuit, error) {
	_, prefix, _, _ := apply(opts) // New reports the options' errors
	return func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
		return New(client, prefix+d.String(), p, opts...)
	}
}

// Key returns the Redis key that holds the circuit's record.
func (c *Circuit) Key() string { return c.key }

// apply reads the options over this package's defaults.
func apply(opts []Option) (sharedstate.Config, string, keyOptions, error) {
	keys := keyOptions{prefix: DefaultKeyPrefix, ttl: DefaultTTL}
	cfg, prefix, err := sharedstate.Apply(sharedstate.Config{}, &keys, opts)
	return cfg, prefix, keys, err
}
