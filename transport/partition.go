package transport

import "time"

// PartitionRouter is implemented by publishers whose destinations are split into
// partitions that keep evidence of their own under the destination's circuit (the
// Kafka adapters; see registry.Partitions). The outbox uses it to hold the rows of
// an isolated partition without holding their destination.
type PartitionRouter interface {
	// PartitionOf returns the partition a message with key is bound to at d, and
	// until when that partition refuses calls: zero when it admits one now (healthy,
	// or due for its probe). ok is false when the message is not bound to a
	// partition (no key, or a partitioner that does not hash keys) or the publisher
	// does not know d's partitions yet.
	PartitionOf(d Destination, key []byte) (partition int, refusedUntil time.Time, ok bool)
}
