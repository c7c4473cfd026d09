package outbox

import (
	"cmp"
	"context"
	"slices"
	"strings"
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

// DeadCount is how many dead rows have one reason (DeadReason of their LastError).
type DeadCount struct {
	Reason string
	Rows   int64
}

// OnCall is what an admin API or CLI reads beyond DeadLetters: the holds and the dead
// rows by reason. MemoryStore and the PostgreSQL store are OnCall, with the same
// answers.
type OnCall interface {
	// Holds returns every recorded hold, by destination.
	Holds(ctx context.Context) ([]HoldInfo, error)
	// DeadCounts returns the dead rows counted by reason, by reason.
	DeadCounts(ctx context.Context) ([]DeadCount, error)
}

// DeadReason returns the reason of a dead row's LastError: the text before its first
// ": " (see the Reason constants), all of it when there is none. A DeadFilter with
// that Reason picks the row (DeadFilter.MatchesReason).
func DeadReason(lastError string) string {
	reason, _, _ := strings.Cut(lastError, ": ")
	return reason
}

// Holds implements OnCall.
func (s *MemoryStore) Holds(ctx context.Context) ([]HoldInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]HoldInfo, 0, len(s.holds))
	for d, h := range s.holds {
		out = append(out, HoldInfo{Destination: d, Until: h.until, Since: h.since, Unusable: h.reason})
	}
	slices.SortFunc(out, func(a, b HoldInfo) int { return strings.Compare(a.Destination.String(), b.Destination.String()) })
	return out, nil
}

// DeadCounts implements OnCall.
func (s *MemoryStore) DeadCounts(ctx context.Context) ([]DeadCount, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := map[string]int64{}
	for _, r := range s.rows {
		if r != nil && r.Status == StatusDead {
			counts[DeadReason(r.LastError)]++
		}
	}
	out := make([]DeadCount, 0, len(counts))
	for reason, n := range counts {
		out = append(out, DeadCount{Reason: reason, Rows: n})
	}
	slices.SortFunc(out, func(a, b DeadCount) int { return cmp.Compare(a.Reason, b.Reason) })
	return out, nil
}
