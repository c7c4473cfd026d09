package memory

import (
	"cmp"
	"context"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"slices"
	"strings"
	"time"

	"github.com/brokerguard/brokerguard/transport"
)

// BacklogByDestination returns the pending rows per destination, destinations with
// none left out; the ages are measured on the store's clock. Its signature fits
// telemetry.WithOutboxBacklog.
func (s *Store) BacklogByDestination(ctx context.Context) ([]outbox.DestinationBacklog, error) {
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
	var out []outbox.DestinationBacklog
	for _, r := range s.rows[s.settled:] {
		if r.Status != outbox.StatusPending {
			continue
		}
		i, ok := at[r.Destination]
		if !ok {
			i = len(out)
			at[r.Destination] = i
			out = append(out, outbox.DestinationBacklog{Destination: r.Destination})
		}
		out[i].Pending++
		out[i].Oldest = max(out[i].Oldest, now.Sub(r.CreatedAt))
	}
	return out, nil
}

// Holds implements outbox.OnCall.
func (s *Store) Holds(ctx context.Context) ([]outbox.HoldInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]outbox.HoldInfo, 0, len(s.holds))
	for d, h := range s.holds {
		out = append(out, outbox.HoldInfo{Destination: d, Until: h.until, Since: h.since, Unusable: h.reason})
	}
	slices.SortFunc(out, func(a, b outbox.HoldInfo) int { return strings.Compare(a.Destination.String(), b.Destination.String()) })
	return out, nil
}

// DeadCounts implements outbox.OnCall.
func (s *Store) DeadCounts(ctx context.Context) ([]outbox.DeadCount, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := map[string]int64{}
	for _, r := range s.rows {
		if r != nil && r.Status == outbox.StatusDead {
			counts[storekit.DeadReason(r.LastError)]++
		}
	}
	out := make([]outbox.DeadCount, 0, len(counts))
	for reason, n := range counts {
		out = append(out, outbox.DeadCount{Reason: reason, Rows: n})
	}
	slices.SortFunc(out, func(a, b outbox.DeadCount) int { return cmp.Compare(a.Reason, b.Reason) })
	return out, nil
}
