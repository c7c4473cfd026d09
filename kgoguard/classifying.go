package kgoguard

import "github.com/brokerguard/brokerguard/transport"

var _ transport.Classifying = (*Producer)(nil)

// Classifier returns the producer's classifier (Classify unless an option replaced
// it), so that the outbox judges its errors as its circuits do.
func (p *Producer) Classifier() transport.Classifier { return p.classify }
