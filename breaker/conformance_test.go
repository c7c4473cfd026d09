package breaker_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
)

// localCircuit gives the local breaker's overrides the suite's signatures.
type localCircuit struct{ *breaker.Breaker }

func (c localCircuit) ForceOpen(_ context.Context, until time.Time) error {
	c.Breaker.ForceOpen(until)
	return nil
}

func (c localCircuit) ForceClose(_ context.Context, until time.Time) error {
	c.Breaker.ForceClose(until)
	return nil
}

func (c localCircuit) ClearOverride(context.Context) error {
	c.Breaker.ClearOverride()
	return nil
}

func TestConformance(t *testing.T) {
	circuittest.Run(t, circuittest.Backend{
		Scope: breaker.LocalProcess,
		NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
			return func(cfg circuittest.Config) (circuittest.Circuit, error) {
				opts := []breaker.Option{breaker.WithClock(cfg.Clock)}
				if cfg.Observer != nil {
					opts = append(opts, breaker.WithObserver(cfg.Observer))
				}
				b, err := breaker.New("conformance", cfg.Policy, opts...)
				if err != nil {
					return nil, err
				}
				return localCircuit{b}, nil
			}
		},
	})
}
