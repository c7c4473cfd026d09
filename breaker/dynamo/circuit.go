package dynamo

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/transport"
)

// Option configures a Circuit: the options every shared backend takes
// (sharedstate.WithClock, WithMaxStaleness, WithIOTimeout, ...). Here the snapshot's
// MaxStaleness and the RetryDelay after a failed request default to one second, and
// IOTimeout bounds each DynamoDB request. A read of the item serves every caller
// waiting for it, so it is bounded by IOTimeout alone: the caller that makes it waits
// for it whatever its context, while the callers that join it stop waiting when their
// context ends. A caller whose wait outlived the snapshot's MaxStaleness is refused
// rather than admitted on it.
type Option = sharedstate.Option

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
//		dynamo.Factory(client, "circuits", sharedstate.WithIdentityPrefix("billing/"))))
func Factory(client *dynamodb.Client, table string, opts ...Option) func(transport.Destination, breaker.Policy) (breaker.Circuit, error) {
	_, prefix, _ := sharedstate.Apply(sharedstate.Config{}, &struct{}{}, opts) // New reports the options' errors
	return func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
		return New(client, table, prefix+d.String(), p, opts...)
	}
}

func newCircuit(d sharedstate.Driver, table, identity string, p breaker.Policy, opts ...Option) (*Circuit, error) {
	switch {
	case identity == "":
		return nil, errors.New("dynamo: New: empty identity")
	case table == "":
		return nil, fmt.Errorf("dynamo: circuit %q: empty table name", identity)
	}
	cfg, _, err := sharedstate.Apply(sharedstate.Config{}, &struct{}{}, opts)
	if err != nil {
		return nil, fmt.Errorf("dynamo: circuit %q: %w", identity, err)
	}
	cfg.Identity, cfg.Policy, cfg.Scope, cfg.Driver = identity, p, breaker.SharedDependency, d
	cfg.Unavailable = func(err error) error { return &UnavailableError{Identity: identity, Table: table, Err: err} }
	c, err := sharedstate.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamo: %w", err)
	}
	return &Circuit{c}, nil
}
