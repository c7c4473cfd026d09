package registry

import (
	"strconv"
	"strings"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Reasons of the transitions of partitions (Partitions) the registry's observers
// are told, beside the circuits' own (breaker.Transition.Reason). Such a transition
// has the partition's identity ("kafka:orders/3"), From Closed To Open when the
// partition is isolated and From Open To Closed when the isolation ends; the
// destination's circuit itself did not move.
const (
	ReasonPartitionIsolated    = "partition_isolated"     // consecutive failures of the partition's calls
	ReasonPartitionHealed      = "partition_healed"       // a call to the partition succeeded
	ReasonPartitionLeaderMoved = "partition_leader_moved" // another broker leads it: its evidence was about the old one
)

// PartitionOfTransition reports the partition a transition told to the registry's
// observers is about, and false for a transition of a destination's circuit.
func PartitionOfTransition(t breaker.Transition) (int, bool) {
	if !strings.HasPrefix(t.Reason, "partition_") {
		return 0, false
	}
	i := strings.LastIndexByte(t.Identity, '/')
	if i < 0 {
		return 0, false
	}
	p, err := strconv.Atoi(t.Identity[i+1:])
	return p, err == nil
}

// observePartition tells the registry's observers a transition of a partition of d.
func (r *Registry) observePartition(d transport.Destination, t breaker.Transition) {
	for _, f := range r.observers {
		f(d, t)
	}
}

// transition tells the observers that partition p went from one state to another
// at at, for reason. It runs without ps.mu held.
func (ps *Partitions) transition(p int, from, to breaker.State, at time.Time, reason string) {
	if ps.observe == nil {
		return
	}
	ps.observe(ps.dest, breaker.Transition{
		Identity: ps.dest.String() + "/" + strconv.Itoa(p), From: from, To: to, At: at, Reason: reason,
	})
}
