package registry

import (
	"fmt"

	"github.com/brokerguard/brokerguard/transport"
)

// Guarded is implemented by a publisher that takes its destination's circuit itself:
// the Publisher Guard returns, and those of the adapters' constructors
// (kafka.NewPublisher, sqs.NewPublisher, kgoguard.New, ...). GuardedBy returns the
// registry whose circuits it takes. Guard recognises such a publisher and does not
// guard it again; an adapter whose publisher calls Registry.Call, CallHeld or Acquire
// implements Guarded so that it is recognised too.
type Guarded interface {
	transport.Publisher
	GuardedBy() *Registry
}

func (r *Registry) alreadyGuarded(g Guarded) transport.Publisher {
	if owner := g.GuardedBy(); owner != r {
		panic(fmt.Sprintf("registry: Guard: the %T is already guarded by another registry, "+
			"and a call must be judged by one circuit: build it with this registry "+
			"(the adapter's NewPublisher takes it), or guard the raw publisher", g))
	}
	return g
}
