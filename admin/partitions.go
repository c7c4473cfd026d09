package admin

import (
	"strconv"
	"strings"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// IsolatedPartition is the JSON view of one isolated partition of a destination
// (registry.Partitions): listed only while it is isolated, so the list stays as
// short as the outage.
type IsolatedPartition struct {
	Partition int       `json:"partition"`
	Since     time.Time `json:"since"`
	NotBefore time.Time `json:"not_before"` // when it admits its next probe
	// RemainingMS counts down to NotBefore.
	RemainingMS int64 `json:"remaining_ms"`
	Failures    int   `json:"failures"`
	// LastError is the text of the partition's last failure (escaped and redacted
	// as a circuit's last error is); empty when none was told with its error.
	LastError string `json:"last_error,omitempty"`
}

// withPartitions adds d's isolated partitions to its view c.
func (h *Handler) withPartitions(c Circuit, d transport.Destination, now time.Time) Circuit {
	return withIsolated(c, h.reg.IsolatedPartitions(d), now)
}

// withIsolated adds the isolated partitions ps to the view c.
func withIsolated(c Circuit, ps []registry.IsolatedPartition, now time.Time) Circuit {
	for _, p := range ps {
		v := IsolatedPartition{Partition: p.Partition, Since: p.Since, NotBefore: p.NotBefore, Failures: p.Failures, LastError: p.LastError}
		if p.NotBefore.After(now) {
			v.RemainingMS = p.NotBefore.Sub(now).Milliseconds()
		}
		c.IsolatedPartitions = append(c.IsolatedPartitions, v)
	}
	return c
}

// topicOf resolves the name a partition's refusal gives ("kafka:orders/3", see
// registry.PartitionRejectedError) to its destination's live circuit, whose view
// lists the partition while it is isolated; false for any other name. Only reads use
// it: an operator's hold names the destination itself.
func (h *Handler) topicOf(d transport.Destination) (transport.Destination, breaker.Circuit, bool) {
	i := strings.LastIndexByte(d.Name, '/')
	if i <= 0 {
		return d, nil, false
	}
	if p, err := strconv.Atoi(d.Name[i+1:]); err != nil || p < 0 {
		return d, nil, false
	}
	td := transport.Destination{Broker: d.Broker, Name: d.Name[:i]}
	c, ok := h.reg.Lookup(td)
	return td, c, ok
}
