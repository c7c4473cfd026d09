package kgoguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Broker is the broker of every destination a Producer writes to: "kafka", the same
// as the kafka package's, so a topic has one circuit whichever client writes to it.
const Broker = "kafka"

// ErrNotKafka is matched by the error of a Publish to a destination whose broker is
// not "kafka".
var ErrNotKafka = errors.New("kgoguard: not a kafka destination")

// Option configures a Producer.
type Option func(*Producer) error

// WithClassifier replaces Classify as the producer's classifier.
func WithClassifier(c transport.Classifier) Option {
	return option.Check(c == nil, "kgoguard: WithClassifier(nil)", func(p *Producer) { p.classify = c })
}

// Producer produces through a franz-go client under one circuit per topic, taken
// from a registry under the destination "kafka:<topic>". It is safe for concurrent
// use. The client stays the caller's: flush and close it as usual.
type Producer struct {
	cl           *kgo.Client
	reg          *registry.Registry
	classify     transport.Classifier
	defaultTopic string                              // the client's DefaultProduceTopic
	alwaysTopic  bool                                // the client's DefaultProduceTopicAlways
	part         *partitioner                        // the client's partitioner (New requires Partitioner's)
	lastParts    atomic.Pointer[registry.Partitions] // partitions' cache (partitioner.go)
}

var _ transport.Publisher = (*Producer)(nil)

// ErrNoPartitioner is matched by New's error for a client built without
// Partitioner for the Producer's registry.
var ErrNoPartitioner = errors.New("kgoguard: the client's partitioner is not kgoguard.Partitioner for this registry")

// New returns a Producer over cl with the circuits of reg. cl must have been built
// with kgo.RecordPartitioner(Partitioner(reg, inner)) (inner: the partitioner the
// client would otherwise use, nil for franz-go's default): New refuses any other
// client with an error matching ErrNoPartitioner that names the fix. franz-go fixes
// a client's partitioner when the client is made, so the Producer cannot install it;
// and without it a partition whose broker is down is judged only once its records
// have timed out, with every caller that wrote to it held up meanwhile, instead of
// being refused at once (see the package documentation, "Partitions").
func New(cl *kgo.Client, reg *registry.Registry, opts ...Option) (*Producer, error) {
	switch {
	case cl == nil:
		return nil, errors.New("kgoguard: New: nil client")
	case reg == nil:
		return nil, errors.New("kgoguard: New: nil registry")
	}
	part, ok := cl.OptValue(kgo.RecordPartitioner).(*partitioner)
	if !ok || part.reg != reg {
		return nil, fmt.Errorf("kgoguard: New: %w: build the client with kgo.RecordPartitioner(kgoguard.Partitioner(reg, nil)), "+
			"giving a partitioner of your own as the second argument", ErrNoPartitioner)
	}
	p := &Producer{cl: cl, reg: reg, classify: Classify, part: part}
	p.defaultTopic, _ = cl.OptValue(kgo.DefaultProduceTopic).(string)
	p.alwaysTopic, _ = cl.OptValue(kgo.DefaultProduceTopicAlways).(bool)
	leader := cl.PartitionLeader
	part.leader.Store(&leader)
	if err := option.Apply("kgoguard: New", p, opts); err != nil {
		return nil, err
	}
	return p, nil
}

// dest is the destination franz-go will produce r to.
func (p *Producer) dest(r *kgo.Record) transport.Destination {
	if r.Topic == "" || p.alwaysTopic {
		return transport.Destination{Broker: Broker, Name: p.defaultTopic}
	}
	return transport.Destination{Broker: Broker, Name: r.Topic}
}

// Produce is franz-go's Client.Produce under r's topic circuit. When the circuit
// refuses, or the topic is invalid, the client is not called and promise gets the
// error (a *registry.RejectedError, say) before Produce returns. Otherwise the
// permit is completed when franz-go calls the promise, just before promise runs:
// franz-go calls it exactly once for every record, whether the broker answered, the
// record's context ended, its delivery timeout or retries ran out, or the client was
// closed (so a Flush or a Close completes every pending permit). A nil promise is
// allowed.
func (p *Producer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	d := p.dest(r)
	start := p.reg.Start(ctx, d)
	permit, err := p.reg.Acquire(ctx, d)
	if err != nil {
		if promise != nil {
			promise(r, err)
		}
		return
	}
	returned := false
	defer func() {
		if !returned { // the client panicked before taking the record: Neutral
			p.reg.Complete(d, permit, breaker.Neutral)
		}
	}()
	ps := p.partitions(d)
	p.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
		err, refused := p.refused(r, err)
		o := registry.Outcome(ctx, start, err, 1, p.classify)
		switch {
		case refused:
			o = breaker.Neutral
		case ps != nil && r.Partition >= 0:
			ps.Complete(int(r.Partition), o)
			o = ps.TopicOutcome(o, false, int(r.Partition))
		}
		p.reg.Complete(d, permit, o)
		p.reg.NoteOutcome(d, o, err)
		if promise != nil {
			promise(r, err)
		}
	})
	returned = true
}

// ProduceSync is franz-go's Client.ProduceSync with one permit per topic of rs: the
// records of a topic whose circuit refuses are not produced and get its error (a
// *registry.RejectedError) in their result; the others are produced in one
// Client.ProduceSync, and each topic's permit is completed from its records' results
// as Publish's would be. As with franz-go, the results are not in the records' order.
func (p *Producer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	if len(rs) == 0 {
		return nil
	}
	d := p.dest(rs[0])
	single := true
	for _, r := range rs[1:] {
		if p.dest(r) != d {
			single = false
			break
		}
	}
	if single {
		var res kgo.ProduceResults
		err := p.producePartitioned(ctx, d, rs, &res)
		if res == nil { // refused: the client never saw the records
			res = refused(rs, err, nil)
		}
		return res
	}
	return p.produceTopics(ctx, rs)
}

// produceTopics is ProduceSync for records of several topics.
func (p *Producer) produceTopics(ctx context.Context, rs []*kgo.Record) kgo.ProduceResults {
	type group struct {
		start   registry.Start
		permit  registry.Permit
		refused error // the circuit's refusal; nil when admitted
		recs    []*kgo.Record
		done    bool // the permit was completed
	}
	groups := map[transport.Destination]*group{}
	var order []transport.Destination
	var admitted []*kgo.Record
	var out kgo.ProduceResults
	for _, r := range rs {
		d := p.dest(r)
		g, ok := groups[d]
		if !ok {
			g = &group{start: p.reg.Start(ctx, d)}
			g.permit, g.refused = p.reg.Acquire(ctx, d)
			groups[d] = g
			order = append(order, d)
		}
		if g.refused != nil {
			out = append(out, kgo.ProduceResult{Record: r, Err: g.refused})
			continue
		}
		g.recs = append(g.recs, r)
		admitted = append(admitted, r)
	}
	defer func() { // the client or the classifier panicked: Neutral for the permits left
		for d, g := range groups {
			if g.refused == nil && !g.done {
				p.reg.Complete(d, g.permit, breaker.Neutral)
			}
		}
	}()
	var res kgo.ProduceResults
	if len(admitted) > 0 {
		res = p.cl.ProduceSync(ctx, admitted...)
		for i := range res {
			res[i].Err, _ = p.refused(res[i].Record, res[i].Err)
		}
	}
	byTopic := map[transport.Destination]kgo.ProduceResults{}
	for _, r := range res {
		d := p.dest(r.Record)
		byTopic[d] = append(byTopic[d], r)
	}
	for _, d := range order {
		if g := groups[d]; g.refused == nil {
			err := resultsErr(d, g.recs, byTopic[d])
			o := registry.Outcome(ctx, g.start, err, len(g.recs), p.classify)
			g.done = true
			p.reg.Complete(d, g.permit, o)
			p.reg.NoteOutcome(d, o, err)
		}
	}
	return append(out, res...)
}

// refused is the results of records the client never saw: err for each.
func refused(rs []*kgo.Record, err error, out kgo.ProduceResults) kgo.ProduceResults {
	for _, r := range rs {
		out = append(out, kgo.ProduceResult{Record: r, Err: err})
	}
	return out
}

// resultsErr is the error of one topic's results: nil when every record was
// produced, the record's error for a single record, else a *transport.BatchError
// whose indexes are the records' positions in rs.
func resultsErr(d transport.Destination, rs []*kgo.Record, res kgo.ProduceResults) error {
	if len(rs) == 1 && len(res) == 1 {
		return res[0].Err
	}
	var be *transport.BatchError
	for _, r := range res {
		if r.Err == nil {
			continue
		}
		if be == nil {
			be = &transport.BatchError{Destination: d}
		}
		be.Failed = append(be.Failed, transport.MessageError{Index: indexOf(rs, r.Record), Err: r.Err})
	}
	if be == nil {
		return nil
	}
	sortByIndex(be.Failed)
	return be
}

// Publish produces msgs to d's topic, which must be a "kafka" destination, in one
// ProduceSync under the topic's circuit. It returns a *registry.RejectedError
// without touching the client when the circuit refuses; the record's error when
// the one message failed; a *transport.BatchError naming the messages that failed
// when several were given.
func (p *Producer) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	if d.Broker != Broker {
		return fmt.Errorf("%w: %q has broker %q", ErrNotKafka, d.String(), d.Broker)
	}
	recs := make([]kgo.Record, len(msgs))
	rs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		r := &recs[i]
		r.Topic, r.Key, r.Value = d.Name, m.Key, m.Value
		if len(m.Headers) > 0 {
			r.Headers = make([]kgo.RecordHeader, len(m.Headers))
			for j, h := range m.Headers {
				r.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
		rs[i] = r
	}
	// The registry refuses a publish of no messages (registry.ErrNoMessages).
	return p.producePartitioned(ctx, d, rs, nil)
}

// indexOf is r's position in rs; franz-go gives results in the order its promises
// ran, so a result is matched to its record by identity.
func indexOf(rs []*kgo.Record, r *kgo.Record) int {
	return slices.Index(rs, r)
}

func sortByIndex(f []transport.MessageError) {
	slices.SortFunc(f, func(a, b transport.MessageError) int { return a.Index - b.Index })
}
