package dynamo

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/transport"
)

// Defaults of the options.
const (
	DefaultMaxStateStaleness = sharedstate.DefaultMaxStaleness
	DefaultBackendRetryDelay = sharedstate.DefaultRetryDelay
	DefaultIOTimeout         = sharedstate.DefaultIOTimeout
)

// Option configures a Circuit.
type Option func(*options)

type options struct {
	cfg                              sharedstate.Config
	staleness, retryDelay, ioTimeout time.Duration
	prefix                           string
	nilClock, nilRandom              bool
}

// WithMaxStateStaleness sets how old the process-local snapshot of the item may be
// before the circuit stops deciding on it (default one second). An OPEN, or an
// override, written by another replica is seen within this time.
func WithMaxStateStaleness(d time.Duration) Option {
	return func(o *options) { o.staleness = d }
}

// WithBackendRetryDelay sets how long the circuit waits after a failed attempt to
// reach the table before it tries again (default one second). Calls in between that
// need the table are refused at once.
func WithBackendRetryDelay(d time.Duration) Option { return func(o *options) { o.retryDelay = d } }

// WithIOTimeout bounds each DynamoDB request the circuit makes (default two seconds).
// Writes made for an Acquire are also bounded by the caller's context. A read of the
// item serves every caller waiting for it, so it is bounded by this timeout alone:
// the caller that makes it waits for it whatever its context, while the callers that
// join it stop waiting when their context ends. A caller whose wait outlived the
// snapshot's MaxStateStaleness is refused rather than admitted on it.
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

// WithIdentityPrefix puts prefix before the destination in the identities Factory
// makes ("orders-service/" gives "orders-service/kafka:orders"). New ignores it.
func WithIdentityPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithRandom sets the source of jitter: f returns a number in [0, 1) and must be safe
// for concurrent use. The default is math/rand/v2.Float64; New refuses nil.
func WithRandom(f func() float64) Option {
	return func(o *options) { o.cfg.Random, o.nilRandom = f, f == nil }
}

// WithObserver adds a function called after every transition this replica writes or
// learns of from the table, outside any lock and in generation order. A transition
// written by another replica carries that replica's reason and time; a replica that
// did not look in between sees several transitions as one.
func WithObserver(f func(breaker.Transition)) Option {
	return func(o *options) { o.cfg.Observers = append(o.cfg.Observers, f) }
}

// WithErrorHandler is told the errors Permit.Complete cannot return: an outcome or
// transition that could not be written.
func WithErrorHandler(f func(error)) Option { return func(o *options) { o.cfg.OnError = f } }

// Circuit is a circuit breaker whose state lives in one DynamoDB item, shared by every
// replica that uses the same table and identity (scope SharedDependency). The state
// machine is sharedstate.Circuit's; this package keeps the item. It is safe for
// concurrent use and starts no goroutine. Create it with New or Factory.
type Circuit struct {
	*sharedstate.Circuit
}

var _ breaker.Circuit = (*Circuit)(nil)

// New returns the shared circuit identity, kept in table (see CreateTable). The policy
// must be valid, have scope SharedDependency and count consecutive failures
// (FailureWindow 0): window mode is not supported by this backend. New does no I/O;
// the first Acquire (or Refresh) reads the item, creating it when it is missing.
func New(client *dynamodb.Client, table, identity string, p breaker.Policy, opts ...Option) (*Circuit, error) {
	if client == nil {
		return nil, errors.New("dynamo: New: nil DynamoDB client")
	}
	return newCircuit(&tableStore{client: client, table: table}, table, identity, p, opts...)
}

// NewDriver returns the sharedstate.Driver (also a sharedstate.Counter and Lister)
// that keeps records in table, one item per identity: what New builds its circuits
// on. Tools that read or hold shared state use it (sharedstate.Operator, "brokerguard
// circuits --dynamodb-table"), and circuittest.TestDriver checks it.
func NewDriver(client *dynamodb.Client, table string) sharedstate.Driver {
	return &tableStore{client: client, table: table}
}

// Factory returns a factory for registry.WithCircuitFactory that makes a shared
// circuit per destination, with the destination's String() (after
// WithIdentityPrefix's prefix) as its identity:
//
//	reg, err := registry.New(policy, registry.WithCircuitFactory(breaker.SharedDependency,
//		dynamo.Factory(client, "circuits", dynamo.WithIdentityPrefix("billing/"))))
func Factory(client *dynamodb.Client, table string, opts ...Option) func(transport.Destination, breaker.Policy) (breaker.Circuit, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
		return New(client, table, o.prefix+d.String(), p, opts...)
	}
}

func newCircuit(d sharedstate.Driver, table, identity string, p breaker.Policy, opts ...Option) (*Circuit, error) {
	switch {
	case identity == "":
		return nil, errors.New("dynamo: New: empty identity")
	case table == "":
		return nil, fmt.Errorf("dynamo: circuit %q: empty table name", identity)
	case p.Scope != breaker.SharedDependency && p.Validate() == nil:
		return nil, fmt.Errorf("dynamo: circuit %q: %w", identity, &breaker.PolicyError{
			Field: "Scope", Reason: "is " + p.Scope.String() + "; breaker/dynamo provides only SHARED_DEPENDENCY (use breaker.New for a local circuit)"})
	}
	o := options{
		cfg: sharedstate.Config{
			Identity: identity, Policy: p, Scope: breaker.SharedDependency, Driver: d,
			Unavailable: func(err error) error { return &UnavailableError{Identity: identity, Table: table, Err: err} },
		},
		staleness: DefaultMaxStateStaleness, retryDelay: DefaultBackendRetryDelay, ioTimeout: DefaultIOTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.staleness <= 0:
		return nil, fmt.Errorf("dynamo: circuit %q: MaxStateStaleness must be positive (got %v)", identity, o.staleness)
	case o.retryDelay < 0:
		return nil, fmt.Errorf("dynamo: circuit %q: BackendRetryDelay must not be negative (got %v)", identity, o.retryDelay)
	case o.nilClock:
		return nil, fmt.Errorf("dynamo: circuit %q: WithClock(nil)", identity)
	case o.nilRandom:
		return nil, fmt.Errorf("dynamo: circuit %q: WithRandom(nil)", identity)
	case o.ioTimeout <= 0:
		return nil, fmt.Errorf("dynamo: circuit %q: IOTimeout must be positive (got %v)", identity, o.ioTimeout)
	}
	// The engine reads a zero as "the default" and a negative delay as "none".
	o.cfg.MaxStaleness, o.cfg.RetryDelay, o.cfg.IOTimeout = o.staleness, cmp.Or(o.retryDelay, -1), o.ioTimeout
	c, err := sharedstate.New(o.cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamo: %w", err)
	}
	return &Circuit{c}, nil
}
