package transport

import "context"

// Classifying is implemented by publishers that know how their errors are
// classified: the publisher registry.Guard returns (its classifier) and the
// adapters' publishers (kafka, amqp, sqs, kgoguard, saramaguard, watermillguard).
// Code that keeps messages for a publisher, such as the outbox's Processor, asks for
// it when it is not given a classifier.
type Classifying interface {
	Classifier() Classifier
}

type messageIDsKey struct{}

// WithMessageIDs returns a context that carries the stable ids of the messages of
// one Publish call, ids[i] for the i-th message: the outbox passes its rows' ids.
// A publisher that needs an id per message (the sqs adapter, for the
// MessageDeduplicationId of FIFO queues) reads them with MessageIDs. The same
// message published again carries the same id.
func WithMessageIDs(ctx context.Context, ids []string) context.Context {
	return context.WithValue(ctx, messageIDsKey{}, ids)
}

// MessageIDs returns the ids WithMessageIDs put in ctx, or nil.
func MessageIDs(ctx context.Context) []string {
	ids, _ := ctx.Value(messageIDsKey{}).([]string)
	return ids
}
