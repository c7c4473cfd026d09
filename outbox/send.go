package outbox

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/brokerguard/brokerguard/transport"
)

// sent is what one publish of a destination's rows came to.
type sent struct {
	counts         Counts
	published      bool            // some rows went out
	held           time.Time       // the destination was held until then (an outage)
	messageFailure bool            // the whole publish failed for a message's reason; nothing written back
	err            error           // that failure
	pause          time.Duration   // paced by the destination's limit: try again after this (pace.go)
	leased         bool            // paced rows were left leased (pace.go)
	wake           <-chan struct{} // closed when the limit may admit bulk work again (pace.go)
}

// sendEach publishes recs one at a time, in order. A row whose own failure costs it
// an attempt keeps back the later rows of its key (given back uncharged, to keep
// the key's order); an outage holds the destination and gives back the rest.
func (p *Processor) sendEach(ctx context.Context, cl claim, d transport.Destination, recs []Record) (sent, error) {
	token := cl.token
	var out sent
	stopped := map[string]bool{}
	for i, rec := range recs {
		if !p.now().Before(cl.leaseEnd) {
			return out, ErrLeaseExpired
		}
		if !out.held.IsZero() {
			c, err := p.deferRows(ctx, token, recs[i:], p.now())
			out.counts.add(c)
			return out, err
		}
		if k := rec.Message.Key; k != nil && stopped[string(k)] {
			c, err := p.deferRows(ctx, token, recs[i:i+1], p.now())
			out.counts.add(c)
			if err != nil {
				return out, err
			}
			continue
		}
		r, err := p.send(ctx, token, d, recs[i:i+1])
		out.counts.add(r.counts)
		out.published = out.published || r.published
		out.held = r.held
		if err != nil || r.pause > 0 { // paced: the rest stay leased (pace.go)
			out.pause, out.leased, out.wake = r.pause, r.leased || i+1 < len(recs), r.wake
			return out, err
		}
		if r.messageFailure {
			c, err := p.failEach(ctx, token, recs[i:i+1], p.now(), []error{r.err})
			out.counts.add(c)
			if err != nil {
				return out, err
			}
		}
		if (r.messageFailure || r.counts.Failed+r.counts.Dead > 0) && rec.Message.Key != nil {
			stopped[string(rec.Message.Key)] = true
		}
	}
	return out, nil
}

// send publishes recs in one call and writes back what it can: published rows,
// failed entries of a batch, and, on an outage, a hold of the destination with the
// rows given back uncharged. A whole publish that failed for a message's reason is
// reported, not written back.
func (p *Processor) send(ctx context.Context, token string, d transport.Destination, recs []Record) (sent, error) {
	pubErr := p.publishBulk(transport.WithMessageIDs(ctx, p.messageIDs(recs)), d, p.messages(recs))
	var be *transport.BatchError
	partial := errors.As(pubErr, &be) && validIndexes(be, len(recs))
	cancelled := pubErr != nil && ctx.Err() != nil
	if cancelled && !partial {
		// The publish may or may not have reached the broker; leave the rows leased so
		// that they are published again (at least once) rather than counted as failed.
		return sent{}, ctx.Err()
	}
	// What was published must be recorded even if ctx ends now, or it is sent again.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lease)
	defer cancel()
	now := p.now()
	if !partial {
		return p.sendWhole(wctx, token, d, recs, now, pubErr)
	}
	out, err := p.sendPartial(wctx, token, d, recs, now, be, cancelled)
	if cancelled && err == nil {
		// The rest may have failed only because ctx ended: they were left leased, as
		// above, rather than charged an attempt.
		err = ctx.Err()
	}
	return out, err
}

// messages returns the messages of recs, each with its row id in the ID header when
// the Processor has one.
func (p *Processor) messages(recs []Record) []transport.Message {
	msgs := make([]transport.Message, len(recs))
	for i, r := range recs {
		msgs[i] = r.Message
		if p.idHeader != "" {
			h := make([]transport.Header, len(r.Message.Headers), len(r.Message.Headers)+1)
			copy(h, r.Message.Headers)
			msgs[i].Headers = append(h, transport.Header{Key: p.idHeader, Value: strconv.AppendInt(nil, r.ID, 10)})
		}
	}
	return msgs
}

// sendWhole writes back a publish of recs that succeeded or failed as a whole
// (pubErr), with wctx, at now.
func (p *Processor) sendWhole(wctx context.Context, token string, d transport.Destination, recs []Record, now time.Time, pubErr error) (sent, error) {
	var out sent
	pause, refused := p.refusalPause(d, pubErr, now)
	switch {
	case pubErr == nil:
		p.unusable.clear(d)
		n, err := p.store.MarkPublished(wctx, token, now, ids(recs))
		out.counts.Published, out.published = n, true
		return out, err
	case refused:
		return sent{pause: pause, leased: true, wake: bulkWake(p.limiterOf(d))}, nil // released after the claim
	case p.judge(pubErr) == outage && p.partitionOutage(d, recs, pubErr):
		return out, nil // held alone, left leased (partitions.go)
	case p.judge(pubErr) == outage && p.retryOutage(d, now, pubErr):
		c, err := p.deferRows(wctx, token, recs, now)
		return sent{counts: c, pause: p.pauseOf(p.limiterOf(d))}, err
	case p.judge(pubErr) == outage:
		out.held = p.holdUntil(d, now, pubErr)
		c, err := p.hold(wctx, token, d, recs, now, out.held)
		out.counts = c
		return out, err
	case p.judge(pubErr) == unusable:
		var err error
		out.held, out.counts, err = p.holdUnusable(wctx, token, d, recs, now, pubErr)
		return out, err
	}
	return sent{messageFailure: true, err: pubErr}, nil
}

// batchOutcome is a partly failed publish's rows by what their failures said.
type batchOutcome struct {
	ok, own, down, refused []Record
	errs                   []error // of own, in order
	refusal                error   // one of refused's
}

// sortBatch sorts recs by the failures be lists.
func (p *Processor) sortBatch(recs []Record, be *transport.BatchError) batchOutcome {
	failed := map[int]error{}
	for _, f := range be.Failed {
		failed[f.Index] = f.Err
	}
	var b batchOutcome
	for i, r := range recs {
		e, isFailed := failed[i]
		switch {
		case !isFailed:
			b.ok = append(b.ok, r)
		case p.judge(e) == outage || isPartitionRefusal(e):
			b.down = append(b.down, r)
		case p.judge(e) == unusable:
			b.refused, b.refusal = append(b.refused, r), e
		default:
			b.own, b.errs = append(b.own, r), append(b.errs, e)
		}
	}
	return b
}

// sendPartial writes back a publish of recs of which be lists the failed entries,
// with wctx, at now. When cancelled (the caller's context ended during the publish),
// the failed rows are left leased rather than charged.
func (p *Processor) sendPartial(wctx context.Context, token string, d transport.Destination, recs []Record, now time.Time, be *transport.BatchError, cancelled bool) (sent, error) {
	var out sent
	b := p.sortBatch(recs, be)
	if len(b.down) > 0 { // the outage holds the destination, whatever else it said
		b.down = append(b.down, b.refused...)
	} else if len(b.refused) > 0 {
		until, c, err := p.holdUnusable(wctx, token, d, b.refused, now, b.refusal)
		out.held = until
		out.counts.add(c)
		if err != nil {
			return out, err
		}
	}
	if len(b.ok) > 0 {
		p.unusable.clear(d)
		n, err := p.store.MarkPublished(wctx, token, now, ids(b.ok))
		out.counts.Published, out.published = n, true
		if err != nil || cancelled {
			return out, err
		}
	}
	if cancelled {
		return out, nil
	}
	c, err := p.failEach(wctx, token, b.own, now, b.errs)
	out.counts.add(c)
	if err != nil || len(b.down) == 0 {
		return out, err
	}
	if p.partitionOutage(d, b.down, downErrs(be, recs, b.down)) {
		return out, nil // held alone, left leased (partitions.go)
	}
	out.held = p.holdUntil(d, now, nil)
	c, err = p.hold(wctx, token, d, b.down, now, out.held)
	out.counts.add(c)
	return out, err
}

// validIndexes reports whether a BatchError lists only indexes of the publish; an
// adapter that got them wrong cannot be trusted with which messages went out.
func validIndexes(be *transport.BatchError, n int) bool {
	for _, f := range be.Failed {
		if f.Index < 0 || f.Index >= n {
			return false
		}
	}
	return len(be.Failed) > 0
}
