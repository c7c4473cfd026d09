package outbox

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// DefaultUnusableBackoff spaces the probes of a destination that is unusable
// (missing, forbidden, misconfigured): the first after 5s, then doubling up to 5
// minutes, less up to a fifth at random. Someone has to fix such a destination, so
// there is no hurry, but its rows go out within the cap of the fix.
var DefaultUnusableBackoff = Backoff{Initial: 5 * time.Second, Max: 5 * time.Minute, Multiplier: 2, Jitter: 0.2}

// ErrNoClassifier is matched by the error of NewProcessor when it cannot tell a
// message's failure from a broker's or a destination's: no WithClassifier, and a
// publisher that does not say its classifier (transport.Classifying).
var ErrNoClassifier = errors.New("outbox: NewProcessor has no classifier: give WithClassifier(kafka.Classify, amqp.Classify, sqs.Classify, ...) or a publisher that has one (an adapter's NewPublisher, registry.Guard)")

// WithUnusableBackoff sets how long a destination whose publishes say it is unusable
// (the classifier's breaker.Unusable: missing, forbidden, misconfigured) is held
// before the next probe: the n-th such hold in a row lasts as long as b's n-th retry
// wait (default DefaultUnusableBackoff). Its rows spend no attempts; the hold counts against
// MaxCircuitDeferral like an outage.
func WithUnusableBackoff(b Backoff) ProcessorOption {
	return func(p *Processor) error {
		if err := b.Validate(); err != nil {
			return err
		}
		p.unusableBackoff = b
		return nil
	}
}

// WithMessageIDPrefix sets what the ids the Processor passes to the publisher
// (transport.WithMessageIDs) start with, before the row's id in decimal (default
// ""). Give each outbox table that feeds the same SQS FIFO queue its own prefix:
// the sqs adapter makes them the messages' deduplication ids, and SQS drops a
// message whose id it saw in the last five minutes.
func WithMessageIDPrefix(prefix string) ProcessorOption {
	return func(p *Processor) error { p.idPrefix = prefix; return nil }
}

// UnusableHooks is an optional extension of Hooks: a Hooks that implements it is
// told each time the Processor holds a destination because it is unusable, with the
// error's text (package telemetry counts them).
type UnusableHooks interface {
	RecordUnusable(d transport.Destination, reason string)
}

// verdict is what a publish error says, for the outbox.
type verdict uint8

const (
	ownFault verdict = iota // the message's: it costs the row an attempt
	outage                  // the broker's or the circuit's: the destination is held
	unusable                // the destination's: held with the unusable backoff
)

// judge says whose fault a publish error is.
func (p *Processor) judge(err error) verdict {
	if errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrSaturated) || errors.Is(err, breaker.ErrUnavailable) {
		return outage
	}
	switch p.classify(err) {
	case breaker.Failure:
		return outage
	case breaker.Unusable:
		return unusable
	}
	return ownFault
}

// resolveClassifier takes the publisher's classifier when none was given.
func (p *Processor) resolveClassifier() error {
	if p.classify != nil {
		return nil
	}
	if c, ok := p.pub.(transport.Classifying); ok {
		if f := c.Classifier(); f != nil {
			p.classify = f
			return nil
		}
	}
	return ErrNoClassifier
}

// unusableHolds counts, per destination, the holds for unusability in a row.
type unusableHolds struct {
	mu sync.Mutex
	n  map[transport.Destination]int
}

// next counts one more hold of d and returns how many there have been in a row.
func (u *unusableHolds) next(d transport.Destination) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n == nil {
		u.n = map[transport.Destination]int{}
	}
	u.n[d]++
	return u.n[d]
}

// clear forgets d's holds: a publish to it went through.
func (u *unusableHolds) clear(d transport.Destination) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.n, d)
}

// holdUnusable holds d, whose publish of recs failed with err, a destination-wide
// error: until the unusable backoff of its holds in a row, with err as the hold's
// reason. The rows spend no attempt.
func (p *Processor) holdUnusable(ctx context.Context, token string, d transport.Destination, recs []Record, now time.Time, err error) (time.Time, Counts, error) {
	until := now.Add(p.unusableBackoff.delay(p.unusable.next(d), p.random()))
	reason := truncate(err.Error())
	if reason == "" {
		reason = "unusable"
	}
	if h, ok := p.hooks.(UnusableHooks); ok {
		h.RecordUnusable(d, reason)
	}
	c, herr := p.holdFor(ctx, token, d, recs, now, until, reason)
	return until, c, herr
}

// messageIDs are the ids of recs the publisher gets (transport.WithMessageIDs).
func (p *Processor) messageIDs(recs []Record) []string {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = p.idPrefix + strconv.FormatInt(r.ID, 10)
	}
	return ids
}
