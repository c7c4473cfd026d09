package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// unavailableUntil asks d's circuit whether to publish before trying. It returns a
// non-zero time until which d should be held when the circuit is open with its
// deadline ahead, or cannot be had. It only looks (Snapshot): the guarded publisher
// acquires the permit, so a half-open circuit's probe is taken by a real publish.
func (p *Processor) unavailableUntil(d transport.Destination, now time.Time) time.Time {
	if p.circuits == nil {
		return time.Time{}
	}
	c, err := p.circuits.Circuit(d)
	if err != nil { // the registry could not give a circuit (cap reached, shared backend down)
		return now.Add(p.rejectedDelay)
	}
	s := c.Snapshot()
	// Shadow and FailOpen circuits let calls through while open (breaker.Mode), so
	// their rows are published, not held.
	if s.State == breaker.Open && s.Mode == breaker.Enforce && s.NotBefore.After(now) {
		return s.NotBefore
	}
	return time.Time{}
}

// holdUntil is how long to hold d after an outage failure: the circuit's open
// deadline when it has one ahead, else the rejected delay.
func (p *Processor) holdUntil(d transport.Destination, now time.Time, rejection error) time.Time {
	var oe *breaker.OpenError
	if errors.As(rejection, &oe) && oe.NotBefore.After(now) {
		return oe.NotBefore
	}
	if until := p.unavailableUntil(d, now); !until.IsZero() {
		return until
	}
	return now.Add(p.rejectedDelay)
}

// claim is one ProcessPending's claim: its token fences every write-back, and its
// rows are not published once its lease has ended.
type claim struct {
	token    string
	leaseEnd time.Time
}

// dispatch handles the rows of one destination, in id order, and writes them back.
func (p *Processor) dispatch(ctx context.Context, cl claim, d transport.Destination, recs []Record, pc *pacing) (Counts, error) {
	token := cl.token
	now := p.now()
	if err := d.Validate(); err != nil {
		return p.failDead(ctx, token, recs, now, ReasonInvalidDestination, err.Error())
	}
	var c Counts
	good := recs[:0:0]
	var poison []Record
	for _, r := range recs {
		if r.Undecodable != "" {
			poison = append(poison, r)
		} else {
			good = append(good, r)
		}
	}
	for _, r := range poison { // each has its own detail
		c2, err := p.failDead(ctx, token, []Record{r}, now, ReasonUndecodable, r.Undecodable)
		c.add(c2)
		if err != nil {
			return c, err
		}
	}
	probe := recs[0].Probe
	if len(good) == 0 {
		if probe { // nothing to probe with
			return c, p.reprobe(ctx, token, d, now)
		}
		return c, nil
	}
	if until := p.unavailableUntil(d, now); !until.IsZero() {
		c2, err := p.hold(ctx, token, d, good, now, until)
		c.add(c2)
		return c, err
	}
	// Partition holds (partitions.go): one partition at a time, isolated ones held alone.
	if groups, ok := p.partitionGroups(d, good, now, probe); ok {
		for _, g := range groups {
			c2, err := p.dispatch(ctx, cl, d, g, pc)
			c.add(c2)
			if err != nil {
				return c, err
			}
		}
		return c, nil
	}
	if good = p.pace(pc, p.limiterOf(d), good); len(good) == 0 { // bulk work: pace.go
		return c, nil
	}
	r, err := p.send(ctx, token, d, good)
	c.add(r.counts)
	pc.after(r)
	if err != nil || r.pause > 0 {
		return c, err
	}
	if r.messageFailure && len(good) > 1 {
		// One of the rows made the whole publish fail: send them one at a time, so
		// that it ends alone and the others go on.
		r, err = p.sendEach(ctx, cl, d, good)
		c.add(r.counts)
		pc.after(r) // rows a limit paced stay leased until the claim releases them
		if err != nil {
			return c, err
		}
	} else if r.messageFailure {
		c2, err := p.failEach(ctx, token, good, p.now(), []error{r.err})
		c.add(c2)
		if err != nil {
			return c, err
		}
	}
	switch {
	case !probe:
	case r.published:
		err = p.store.Unhold(ctx, d, token)
	case r.held.IsZero(): // the probe failed for reasons of its message
		err = p.reprobe(ctx, token, d, p.now())
	}
	return c, err
}

// reprobe ends at once the hold whose probe token holds, so that the next claim
// probes d again with its next row.
func (p *Processor) reprobe(ctx context.Context, token string, d transport.Destination, now time.Time) error {
	_, err := p.store.Hold(ctx, Hold{Destination: d, Token: token, Now: now, Until: now, MaxDeferral: p.maxDeferral})
	return err
}
