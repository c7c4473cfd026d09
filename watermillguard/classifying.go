package watermillguard

import (
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

var _ transport.Classifying = transportPublisher{}

// Classifier returns the classifier the publisher was built with (WithClassifier;
// every error a Failure without one), so that the outbox judges its errors as its
// circuits do.
func (t transportPublisher) Classifier() transport.Classifier {
	if t.p.classify == nil {
		return func(error) breaker.Outcome { return breaker.Failure }
	}
	return t.p.classify
}
