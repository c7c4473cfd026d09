package sqs

import "github.com/brokerguard/brokerguard/transport"

var _ transport.Classifying = (*Publisher)(nil)

// Classifier returns Classify, so that the outbox judges the publisher's errors as
// its circuits do.
func (p *Publisher) Classifier() transport.Classifier { return Classify }
