package outbox

import (
	"context"
	"time"

	"github.com/brokerguard/brokerguard/transport"
)

// HoldInfo is one held destination as a store records it: its rows are not claimed
// before Until, and Since is when the outage began. A hold whose Until has passed is
// still listed until the next claim takes its probe or drops it.
type HoldInfo struct {
	Destination transport.Destination
	Until       time.Time
	Since       time.Time
	// Unusable, when not empty, says the destination is held because it cannot take
	// messages although its broker answers (Hold.Reason: the error that said so);
	// empty for an outage (an open circuit, an unhealthy broker).
	Unusable string
}

// DeadCount is how many dead rows have one reason (outbox/storekit's DeadReason of
// their LastError).
type DeadCount struct {
	Reason string
	Rows   int64
}

// OnCall is what an admin API or CLI reads beyond DeadLetters: the holds and the dead
// rows by reason. The memory and PostgreSQL stores are OnCall, with the same
// answers.
type OnCall interface {
	// Holds returns every recorded hold, by destination.
	Holds(ctx context.Context) ([]HoldInfo, error)
	// DeadCounts returns the dead rows counted by reason, by reason.
	DeadCounts(ctx context.Context) ([]DeadCount, error)
}
