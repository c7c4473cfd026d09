package watermillguard

import "github.com/brokerguard/brokerguard/registry"

// GuardedBy returns the registry whose circuits guard the publisher that AsTransport
// returned, so that registry.Guard recognises it as already guarded (see
// registry.Guarded).
func (t transportPublisher) GuardedBy() *registry.Registry { return t.p.reg }

var _ registry.Guarded = transportPublisher{}
