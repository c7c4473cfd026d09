package outbox

import (
	"time"

	"github.com/brokerguard/brokerguard/transport"
)

// DestinationBacklog is one destination's pending messages: how many, and how long
// the oldest of them has waited.
type DestinationBacklog struct {
	Destination transport.Destination
	Pending     int64
	Oldest      time.Duration
	// Estimated is set when Pending is an estimate: a store that counts a large
	// backlog from a sample (outbox/postgres past BacklogExactUpTo rows).
	Estimated bool
}
