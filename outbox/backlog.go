package outbox

import (
	"context"
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

// BacklogByDestination returns the pending rows per destination, destinations with
// none left out; the ages are measured on the store's clock. Its signature fits
// telemetry.WithOutboxBacklog.
func (s *MemoryStore) BacklogByDestination(ctx context.Context) ([]DestinationBacklog, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	if s.clock != nil {
		now = s.clock.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	at := map[transport.Destination]int{}
	var out []DestinationBacklog
	for _, r := range s.rows[s.settled:] {
		if r.Status != StatusPending {
			continue
		}
		i, ok := at[r.Destination]
		if !ok {
			i = len(out)
			at[r.Destination] = i
			out = append(out, DestinationBacklog{Destination: r.Destination})
		}
		out[i].Pending++
		out[i].Oldest = max(out[i].Oldest, now.Sub(r.CreatedAt))
	}
	return out, nil
}
