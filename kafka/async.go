package kafka

import (
	"context"
	"slices"
	"sync"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// tracker completes the permits of an asynchronous writer's calls when the writer
// reports their messages through Completion.
type tracker struct {
	reg      *registry.Registry // completes the permits, so that it counts the calls
	classify transport.Classifier
	next     func([]kafkago.Message, error) // the Completion set before ours

	mu      sync.Mutex
	pending map[*call]struct{} // calls whose messages are not all reported; guarded by mu
}

// call is one asynchronous write: one permit for its messages.
type call struct {
	permit registry.Permit
	dest   transport.Destination
	n      int
	left   int                      // messages not reported yet; guarded by tracker.mu
	failed []transport.MessageError // guarded by tracker.mu
}

// tag is what the tracker puts in a queued message's WriterData.
type tag struct {
	owner *tracker
	call  *call
	index int
	user  any // the caller's WriterData, given back before the previous Completion runs
}

// write queues msgs (copied, so that WriterData can carry the call) and leaves the
// permit to the Completion, unless the writer refuses them outright.
func (t *tracker) write(ctx context.Context, p *Publisher, permit registry.Permit, start registry.Start, d transport.Destination, msgs []kafkago.Message) error {
	c := &call{permit: permit, dest: d, n: len(msgs), left: len(msgs)}
	tags := make([]tag, len(msgs))
	queued := make([]kafkago.Message, len(msgs))
	for i := range msgs {
		tags[i] = tag{owner: t, call: c, index: i, user: msgs[i].WriterData}
		queued[i] = msgs[i]
		queued[i].WriterData = &tags[i]
	}
	t.mu.Lock()
	t.pending[c] = struct{}{}
	t.mu.Unlock()
	judged := false
	defer func() {
		if !judged { // the writer (a Balancer, say) or the classifier panicked: Neutral
			t.forget(c, breaker.Neutral)
		}
	}()
	err := p.writeErr(ctx, d, p.w.WriteMessages(ctx, queued...))
	if err == nil {
		judged = true
		return nil
	}
	// An asynchronous writer fails only before it queues anything (metadata, a
	// message too large, a closed writer): no Completion will come for this call.
	o := registry.Outcome(ctx, start, err, len(msgs), t.classify)
	judged = true
	t.forget(c, o)
	t.reg.NoteOutcome(c.dest, o, err)
	return err
}

// forget drops a call for which no Completion will come and completes its permit
// with o, unless Close has given it up already.
func (t *tracker) forget(c *call, o breaker.Outcome) {
	t.mu.Lock()
	_, live := t.pending[c]
	delete(t.pending, c)
	t.mu.Unlock()
	if live {
		t.reg.Complete(c.dest, c.permit, o)
	}
}

// completion is the writer's Completion: it is called once per written (or failed)
// batch of one partition, from the writer's goroutines.
func (t *tracker) completion(msgs []kafkago.Message, err error) {
	var done []*call
	t.mu.Lock()
	for i := range msgs {
		tg, ok := msgs[i].WriterData.(*tag)
		if !ok || tg.owner != t {
			continue
		}
		msgs[i].WriterData = tg.user
		c := tg.call
		if _, live := t.pending[c]; !live { // given up by Close
			continue
		}
		if err != nil {
			c.failed = append(c.failed, transport.MessageError{Index: tg.index, Err: &WriteError{Topic: c.dest.Name, Err: err}})
		}
		if c.left--; c.left == 0 {
			delete(t.pending, c)
			done = append(done, c)
		}
	}
	t.mu.Unlock()
	for _, c := range done {
		o, err := c.outcome(t.classify)
		t.reg.Complete(c.dest, c.permit, o)
		t.reg.NoteOutcome(c.dest, o, err)
	}
	if t.next != nil {
		t.next(msgs, err)
	}
}

// outcome is the call's outcome once every message is reported, and its error (nil
// when every message went out); it requires that no other goroutine can still change
// the call.
func (c *call) outcome(classify transport.Classifier) (breaker.Outcome, error) {
	if len(c.failed) == 0 {
		return breaker.Success, nil
	}
	slices.SortFunc(c.failed, func(a, b transport.MessageError) int { return a.Index - b.Index })
	be := &transport.BatchError{Destination: c.dest, Failed: c.failed}
	return registry.Outcome(context.Background(), registry.Start{}, be, c.n, classify), be
}

// abandon completes every pending call's permit as Neutral and forgets the calls;
// later reports of their messages change nothing. It returns how many it gave up.
func (t *tracker) abandon() int {
	t.mu.Lock()
	calls := make([]*call, 0, len(t.pending))
	for c := range t.pending {
		calls = append(calls, c)
	}
	clear(t.pending)
	t.mu.Unlock()
	for _, c := range calls {
		t.reg.Complete(c.dest, c.permit, breaker.Neutral)
	}
	return len(calls)
}
