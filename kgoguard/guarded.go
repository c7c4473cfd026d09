package kgoguard

import "github.com/brokerguard/brokerguard/registry"

// GuardedBy returns the registry whose circuits guard the producer, so that
// registry.Guard recognises it as already guarded (see registry.Guarded).
func (p *Producer) GuardedBy() *registry.Registry { return p.reg }

var _ registry.Guarded = (*Producer)(nil)
