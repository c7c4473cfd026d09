package kafka

import "github.com/brokerguard/brokerguard/transport"

var _ transport.Classifying = (*Publisher)(nil)

// Classifier returns the publisher's classifier (Classify unless WithClassifier
// replaced it), so that the outbox judges its errors as its circuits do.
func (p *Publisher) Classifier() transport.Classifier { return p.classify }
