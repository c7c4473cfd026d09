package saramaguard

import "github.com/brokerguard/brokerguard/registry"

// GuardedBy returns the registry whose circuits guard the producer, so that
// registry.Guard recognises it as already guarded (see registry.Guarded).
func (s *SyncProducer) GuardedBy() *registry.Registry { return s.reg }

var _ registry.Guarded = (*SyncProducer)(nil)
