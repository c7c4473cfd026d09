package kgoguard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Partitioner returns a franz-go partitioner, for kgo.RecordPartitioner, that keeps
// the partition evidence of reg's circuits (registry.Partitions) in the client's
// choices, in the spirit of the Java producer's adaptive partitioning (KIP-794): it
// asks inner (franz-go's default partitioner when nil) and
//
//   - refuses a record that must keep its partition (inner's RequiresConsistency: a
//     keyed record) when that partition is isolated: the record fails before it is
//     buffered, and a Producer reports it as a *registry.PartitionRejectedError;
//   - moves a record that need not keep its partition to the next partition that is
//     not isolated, when inner chose an isolated one.
//
// New requires a Producer's client to have this partitioner, made with the
// Producer's registry.
func Partitioner(reg *registry.Registry, inner kgo.Partitioner) kgo.Partitioner {
	if inner == nil {
		// franz-go's default (kgo.RecordPartitioner's documentation).
		inner = kgo.UniformBytesPartitioner(64<<10, true, true, nil)
	}
	return &partitioner{reg: reg, inner: inner}
}

type partitioner struct {
	reg      *registry.Registry
	inner    kgo.Partitioner
	refusals sync.Map                                                  // *kgo.Record -> *registry.PartitionRejectedError, until the Producer takes it
	leader   atomic.Pointer[func(string, int32) (int32, int32, error)] // the client's PartitionLeader, set by New
	keyers   sync.Map                                                  // topic -> *keyer, for PartitionOf
}

func (p *partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	ps, _ := p.reg.Partitions(transport.Destination{Broker: Broker, Name: topic})
	t := &topicPartitioner{p: p, topic: topic, ps: ps, inner: p.inner.ForTopic(topic)}
	t.backup, _ = t.inner.(kgo.TopicBackupPartitioner)
	// franz-go holds the topic's lock through buffering for a partitioner that wants
	// OnNewBatch: only one whose inner partitioner wants it says so.
	if _, ok := t.inner.(kgo.TopicPartitionerOnNewBatch); ok {
		return &batchTopicPartitioner{t}
	}
	return t
}

// batchTopicPartitioner is a topicPartitioner whose inner one is told of new batches.
type batchTopicPartitioner struct{ *topicPartitioner }

func (b *batchTopicPartitioner) OnNewBatch() {
	b.inner.(kgo.TopicPartitionerOnNewBatch).OnNewBatch()
}

type topicPartitioner struct {
	p      *partitioner
	topic  string
	ps     *registry.Partitions // nil when the registry keeps no partition evidence
	inner  kgo.TopicPartitioner
	backup kgo.TopicBackupPartitioner // inner, when it partitions by backup (franz-go's default does)
}

func (t *topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return t.inner.RequiresConsistency(r)
}

// Partition implements kgo.TopicPartitioner. franz-go gives a record that requires
// consistency the topic's n partitions, so pick is the partition itself; others get
// the writable partitions only, which are the partitions themselves only when all
// are writable (n is the topic's count).
func (t *topicPartitioner) Partition(r *kgo.Record, n int) int {
	return t.route(r, n, t.inner.Partition(r, n))
}

// PartitionByBackup implements kgo.TopicBackupPartitioner, which franz-go prefers to
// Partition: inner partitions by backup when it can.
func (t *topicPartitioner) PartitionByBackup(r *kgo.Record, n int, backup kgo.TopicBackupIter) int {
	if t.backup != nil {
		return t.route(r, n, t.backup.PartitionByBackup(r, n, backup))
	}
	return t.route(r, n, t.inner.Partition(r, n))
}

// route is Partition's answer for r once inner picked pick.
func (t *topicPartitioner) route(r *kgo.Record, n, pick int) int {
	if t.ps == nil || pick < 0 || pick >= n {
		return pick
	}
	if !t.inner.RequiresConsistency(r) {
		if n == t.ps.Count() {
			pick, _ = t.ps.Route(pick, n, false)
		}
		return pick
	}
	t.ps.SetCount(n)
	err := t.ps.Admit(pick)
	if err == nil {
		return pick
	}
	if f := t.p.leader.Load(); f != nil { // a new leader resets the old one's evidence
		if l, _, lerr := (*f)(t.topic, int32(pick)); lerr == nil && l >= 0 {
			t.ps.Leader(pick, l)
			if err = t.ps.Admit(pick); err == nil {
				return pick
			}
		}
	}
	r.Partition = int32(pick)
	t.p.refusals.Store(r, err)
	return -1 // franz-go fails the record: "invalid record partitioning choice"
}

// refusal returns the partition's refusal of r when this partitioner refused it.
func (p *partitioner) refusal(r *kgo.Record) (error, bool) {
	err, ok := p.refusals.LoadAndDelete(r)
	if !ok {
		return nil, false
	}
	return err.(error), true
}

// partitions is d's partition evidence, nil when the registry keeps none. The last
// destination's is kept at hand: most producers write to one topic.
func (p *Producer) partitions(d transport.Destination) *registry.Partitions {
	if ps := p.lastParts.Load(); ps != nil && ps.Destination() == d {
		return ps
	}
	ps, _ := p.reg.Partitions(d)
	if ps != nil {
		p.lastParts.Store(ps)
	}
	return ps
}

// refused returns the partition's refusal in place of err when the client's
// partitioner refused r, and whether it did.
func (p *Producer) refused(r *kgo.Record, err error) (error, bool) {
	if err == nil || p.part == nil {
		return err, false
	}
	if rerr, ok := p.part.refusal(r); ok {
		return rerr, true
	}
	return err, false
}

// producePartitioned produces rs, all to d, in one Client.ProduceSync under d's
// circuit and its partitions' evidence (registry.CallPartitioned): each partition the
// records reached is told their outcome. When out is not nil it gets the results.
func (p *Producer) producePartitioned(ctx context.Context, d transport.Destination, rs []*kgo.Record, out *kgo.ProduceResults) error {
	return p.reg.CallPartitioned(ctx, d, registry.PartitionedCall{
		N: len(rs), Classify: p.classify,
		Route: p.refuseIsolated(d, rs),
		Send: func(ctx context.Context, idx []int, parts []int) error {
			sent := rs
			if len(idx) < len(rs) {
				sent = make([]*kgo.Record, len(idx))
				for j, i := range idx {
					sent[j] = rs[i]
				}
			}
			res := p.cl.ProduceSync(ctx, sent...)
			var failedParts []int32
			for i := range res {
				r := &res[i]
				var refused bool
				r.Err, refused = p.refused(r.Record, r.Err)
				if refused || r.Record.Partition < 0 {
					continue
				}
				parts[indexOf(rs, r.Record)] = int(r.Record.Partition)
				if r.Err != nil {
					failedParts = append(failedParts, r.Record.Partition)
				}
			}
			p.noteLeaders(d, failedParts)
			if out != nil {
				*out = res
			}
			return resultsErr(d, sent, res)
		},
	})
}

// refuseIsolated is the Route of a ProduceSync of rs: the keyed records bound for a
// partition isolated until after now are refused before the client sees them (the
// client's partitioner would refuse them too, at a higher cost). A partition due for
// its probe is left to the partitioner, which takes the probe.
func (p *Producer) refuseIsolated(d transport.Destination, rs []*kgo.Record) func(*registry.Partitions, []int) []error {
	if p.part == nil {
		return nil
	}
	return func(ps *registry.Partitions, parts []int) []error {
		if !ps.AnyIsolated() { // the healthy path: nothing to place
			return nil
		}
		var refused []error
		for i, r := range rs {
			part, _, ok := p.place(d, r.Key)
			if !ok || ps.RefusedUntil(part).IsZero() {
				continue
			}
			err := ps.Admit(part)
			if err == nil { // its isolation ended meanwhile: the probe is the partitioner's
				ps.Complete(part, breaker.Neutral)
				continue
			}
			if refused == nil {
				refused = make([]error, len(rs))
			}
			refused[i] = err
		}
		return refused
	}
}

// noteLeaders tells d's partitions the leaders of the partitions whose records
// failed, so that a move of leadership resets the old leader's evidence.
func (p *Producer) noteLeaders(d transport.Destination, parts []int32) {
	if len(parts) == 0 {
		return
	}
	ps := p.partitions(d)
	if ps == nil {
		return
	}
	for _, part := range parts {
		if l, _, err := p.cl.PartitionLeader(d.Name, part); err == nil && l >= 0 {
			ps.Leader(int(part), l)
		}
	}
}

// PartitionOf implements transport.PartitionRouter for the outbox: the partition the
// client's partitioner (Partitioner's inner one) gives key, when the client was
// built with Partitioner, the partitioner keeps keys to partitions and the topic's
// partition count is known.
func (p *Producer) PartitionOf(d transport.Destination, key []byte) (int, time.Time, bool) {
	part, ps, ok := p.place(d, key)
	if !ok {
		return 0, time.Time{}, false
	}
	return part, ps.RefusedUntil(part), true
}

// place is the partition the client's partitioner gives key at d, and d's
// partitions; ok is false when it cannot tell (see PartitionOf).
func (p *Producer) place(d transport.Destination, key []byte) (int, *registry.Partitions, bool) {
	if key == nil || p.part == nil || d.Broker != Broker {
		return 0, nil, false
	}
	ps := p.partitions(d)
	if ps == nil || ps.Count() == 0 {
		return 0, nil, false
	}
	n := ps.Count()
	h := p.part.keyer(d.Name)
	r := &kgo.Record{Topic: d.Name, Key: key}
	h.mu.Lock()
	consistent := h.tp.RequiresConsistency(r)
	var part int
	if consistent {
		if b, ok := h.tp.(kgo.TopicBackupPartitioner); ok {
			part = b.PartitionByBackup(r, n, nil) // a keyed record needs no backup
		} else {
			part = h.tp.Partition(r, n)
		}
	}
	h.mu.Unlock()
	if !consistent || part < 0 || part >= n {
		return 0, nil, false
	}
	return part, ps, true
}

var _ transport.PartitionRouter = (*Producer)(nil)

// keyer is a topic partitioner of inner's that PartitionOf asks, apart from the
// client's own (which franz-go guards with its lock).
type keyer struct {
	mu sync.Mutex // guards tp, which need not be safe for concurrent use
	tp kgo.TopicPartitioner
}

func (p *partitioner) keyer(topic string) *keyer {
	if k, ok := p.keyers.Load(topic); ok {
		return k.(*keyer)
	}
	k, _ := p.keyers.LoadOrStore(topic, &keyer{tp: p.inner.ForTopic(topic)})
	return k.(*keyer)
}
