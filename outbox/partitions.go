package outbox

import (
	"errors"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Partition holds. When the publisher routes keyed messages to partitions that keep
// evidence of their own (transport.PartitionRouter: the Kafka adapters), a
// destination's rows are dispatched one partition at a time, and the rows of a
// partition that refuses calls are held alone: they are left leased, untouched, so
// that no write and no attempt is spent on them, later rows of their keys wait
// behind them (the claim's key rule), and the claim after their lease ends takes
// them again. The first row claimed once a partition is due for its probe goes out
// as that probe. The destination is held only when its own circuit opens.

// partitionGroups splits recs, all to d and not a destination's probe, per
// partition: the rows of a partition that refuses calls until after now are left
// out (held), the rows the router cannot place form one group of their own. It
// returns handled false, and nothing, when there is no router or when recs form one
// group with nothing held: dispatch then sends them as it always does.
func (p *Processor) partitionGroups(d transport.Destination, recs []Record, now time.Time, probe bool) (groups [][]Record, handled bool) {
	router, ok := p.pub.(transport.PartitionRouter)
	if !ok || probe {
		return nil, false
	}
	const unplaced = -1
	index := map[int]int{}
	held := false
	for _, r := range recs {
		part, until, ok := router.PartitionOf(d, r.Message.Key)
		if !ok {
			part = unplaced
		} else if until.After(now) {
			held = true
			continue
		}
		i, seen := index[part]
		if !seen {
			i = len(groups)
			index[part] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	if !held && len(groups) <= 1 {
		return nil, false
	}
	return groups, true
}

// partitionOutage reports whether an outage error of a publish of recs to d is
// the partitions' own, so that the rows are held alone (left leased) rather than the
// destination: a partition's refusal, or a failure of rows the router places while
// d's circuit does not refuse calls.
func (p *Processor) partitionOutage(d transport.Destination, recs []Record, err error) bool {
	router, ok := p.pub.(transport.PartitionRouter)
	if !ok || len(recs) == 0 {
		return false
	}
	if err != nil && isPartitionRefusal(err) {
		return true
	}
	if err != nil && errors.Is(err, breaker.ErrOpen) { // the destination's own refusal
		return false
	}
	if !p.unavailableUntil(d, p.now()).IsZero() {
		return false
	}
	for _, r := range recs {
		if _, _, ok := router.PartitionOf(d, r.Message.Key); !ok {
			return false
		}
	}
	return true
}

// isPartitionRefusal reports whether err is a partition's refusal: every
// message's, when it is a *transport.BatchError.
func isPartitionRefusal(err error) bool {
	if be, ok := errors.AsType[*transport.BatchError](err); ok {
		for _, f := range be.Failed {
			if !errors.Is(f.Err, transport.ErrPartitionRejected) {
				return false
			}
		}
		return len(be.Failed) > 0
	}
	return errors.Is(err, transport.ErrPartitionRejected)
}

// downErrs is the errors of be for the rows down of recs, as one BatchError.
func downErrs(be *transport.BatchError, recs, down []Record) error {
	want := map[int64]bool{}
	for _, r := range down {
		want[r.ID] = true
	}
	out := &transport.BatchError{Destination: be.Destination}
	for _, f := range be.Failed {
		if want[recs[f.Index].ID] {
			out.Failed = append(out.Failed, f)
		}
	}
	return out
}
