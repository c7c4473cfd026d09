package bench

import (
	"context"

	fsgo "github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/sony/gobreaker/v2"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The columns of the partial-failure scenarios (incidents_test.go): how the same
// adapter publisher is protected. Everything that depends on the registry's
// constructor and the library's default policy is in this file, so that a change
// of either changes only this file.
const (
	colNone      = "no breaker"
	colDefault   = "DefaultPolicy"
	colFailsafe  = "failsafe-go limiter"
	colGobreaker = "gobreaker"
)

// incidentColumns are the columns in the order the tables print them.
var incidentColumns = []string{colNone, colDefault, colFailsafe, colGobreaker}

// publishFunc is a publisher's Publish.
type publishFunc func(ctx context.Context, d transport.Destination, msgs ...transport.Message) error

// columnRegistry returns the registry the column's adapter publisher is guarded by:
// the library's DefaultPolicy for that column; a disabled policy for the others, so
// that no breaker, failsafe-go and gobreaker see the same unprotected publisher.
func columnRegistry(column string) (*registry.Registry, error) {
	if column == colDefault {
		return registry.New(registry.DefaultPolicy())
	}
	return registry.New(registry.Policy{Circuit: breaker.DisabledPolicy()})
}

// columnWrap wraps the column's peer library, if it has one, around publish.
func columnWrap(column string, publish publishFunc) publishFunc {
	switch column {
	case colFailsafe:
		return withFailsafeLimiter(publish)
	case colGobreaker:
		return withGobreaker(publish)
	}
	return publish
}

// withFailsafeLimiter wraps failsafe-go's adaptive limiter, with its defaults, around
// publish: over the limit a call is refused with adaptivelimiter.ErrExceeded.
func withFailsafeLimiter(publish publishFunc) publishFunc {
	lim := adaptivelimiter.NewBuilder[any]().Build()
	return func(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
		return fsgo.With[any](lim).WithContext(ctx).Run(func() error { return publish(ctx, d, msgs...) })
	}
}

// withGobreaker wraps sony/gobreaker's circuit breaker around publish, with its
// defaults (one probe, a 60 s open state, counts never cleared while closed) except
// that 5 consecutive failures open it, as the README's policy does.
func withGobreaker(publish publishFunc) publishFunc {
	cb := gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "incident",
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
	})
	return func(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
		_, err := cb.Execute(func() (any, error) { return nil, publish(ctx, d, msgs...) })
		return err
	}
}
