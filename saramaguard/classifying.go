package saramaguard

import "github.com/brokerguard/brokerguard/transport"

var _ transport.Classifying = (*SyncProducer)(nil)

// Classifier returns the producer's classifier (Classify unless an option replaced
// it), so that the outbox judges its errors as its circuits do.
func (s *SyncProducer) Classifier() transport.Classifier { return s.classify }
