package transport

import (
	"errors"
	"time"
)

// ErrPartitionRejected is matched (errors.Is) by the refusal of a call to an isolated
// partition (registry's *PartitionRejectedError), so that code below the registry,
// such as the outbox, can tell a partition's refusal from its destination's without
// importing the registry.
var ErrPartitionRejected = errors.New("transport: partition rejected")

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
