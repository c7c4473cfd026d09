package kafka

import (
	"context"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// balancer is the writer's Balancer once NewPublisher has set it: it asks the
// Balancer the writer had (kafka-go's RoundRobin when none) and steers unkeyed
// messages away from the topic's isolated partitions (registry.Partitions). A keyed
// message keeps the partition the user's Balancer gives it: Publish refuses it
// before the write when that partition is isolated.
type balancer struct {
	p     *Publisher
	inner kafkago.Balancer
	// byKey says that inner gives a key always the same partition (of a given
	// count): every Balancer but kafka-go's RoundRobin and LeastBytes, which ignore
	// keys. Only then does a keyed message keep its partition.
	byKey bool
}

// keysPartitions reports whether b gives a key always the same partition.
func keysPartitions(b kafkago.Balancer) bool {
	switch b.(type) {
	case *kafkago.RoundRobin, *kafkago.LeastBytes:
		return false
	}
	return true
}

// keyed reports whether msg must keep the partition the user's Balancer gives it.
func (b *balancer) keyed(msg *kafkago.Message) bool { return msg.Key != nil && b.byKey }

// route is what Publish puts in a message's WriterData: the partition it chose for
// the message, or, when it did not know the topic's partitions yet, the partition the
// balancer chose, for the outcome to be told to.
type route struct {
	partition int
	decided   bool // Publish chose it before the write
}

// Balance implements kafkago.Balancer.
func (b *balancer) Balance(msg kafkago.Message, partitions ...int) int {
	rt, _ := msg.WriterData.(*route)
	n := len(partitions)
	if rt != nil && rt.decided && rt.partition < n {
		return rt.partition
	}
	pick := b.inner.Balance(msg, partitions...)
	p := pick
	// kafka-go passes the partitions 0..n-1; anything else is not a list Route knows.
	if n > 0 && partitions[n-1] == n-1 {
		if ps := b.p.partitions(msg.Topic); ps != nil {
			ps.SetCount(n)
			p, _ = ps.Route(pick, n, b.keyed(&msg)) // a keyed refusal is Publish's to make
		}
	}
	if rt != nil {
		rt.partition = p
	}
	return p
}

// partitions is the partition evidence of topic (the writer's when empty), nil when
// the registry keeps none.
func (p *Publisher) partitions(topic string) *registry.Partitions {
	if topic == "" {
		topic = p.w.Topic
	}
	ps, _ := p.reg.Partitions(transport.Destination{Broker: Broker, Name: topic})
	return ps
}

// allPartitions returns 0..n-1, shared and never changed.
func (p *Publisher) allPartitions(n int) []int {
	if all := p.all.Load(); all != nil && len(*all) >= n {
		return (*all)[:n]
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	p.all.Store(&all)
	return all
}

// writePartitioned is write for a synchronous writer: the messages are routed before
// the write where the topic's partitions are known, a keyed message bound for an
// isolated partition is refused, and each partition the write reached is told its
// messages' outcome (registry.CallPartitioned).
func (p *Publisher) writePartitioned(ctx context.Context, d transport.Destination, msgs []kafkago.Message) error {
	routes := make([]route, len(msgs))
	for i := range msgs {
		routes[i].partition = -1
		msgs[i].WriterData = &routes[i]
	}
	return p.reg.CallPartitioned(ctx, d, registry.PartitionedCall{
		N: len(msgs), Hold: p.batchHold(), Classify: p.classify,
		Route: func(ps *registry.Partitions, parts []int) []error {
			n := ps.Count()
			if n == 0 { // not known before the first write: the balancer routes
				return nil
			}
			all := p.allPartitions(n)
			var refused []error
			var pb [4]int
			var eb [4]error
			memo := partitionMemo{parts: pb[:0], errs: eb[:0]} // one admission per partition and call: a probe is the call's
			for i := range msgs {
				pick := p.bal.inner.Balance(msgs[i], all...)
				var part int
				var err error
				if p.bal.keyed(&msgs[i]) {
					part, err = pick, memo.admit(ps, pick)
				} else {
					part, err = ps.Route(pick, n, false)
				}
				routes[i] = route{partition: part, decided: true}
				parts[i] = part
				if err != nil {
					if refused == nil {
						refused = make([]error, len(msgs))
					}
					refused[i] = err
				}
			}
			return refused
		},
		Send: func(ctx context.Context, idx []int, parts []int) error {
			batch := msgs
			if len(idx) < len(msgs) {
				batch = make([]kafkago.Message, len(idx))
				for j, i := range idx {
					batch[j] = msgs[i]
				}
			}
			err := p.writeErr(ctx, d, p.w.WriteMessages(ctx, batch...))
			for _, i := range idx {
				parts[i] = routes[i].partition
			}
			return err
		},
	})
}

// PartitionOf implements transport.PartitionRouter for the outbox: the partition
// the writer's own Balancer gives key among the topic's partitions, when it keeps
// keys to partitions and the Publisher has seen the topic's partition count.
func (p *Publisher) PartitionOf(d transport.Destination, key []byte) (int, time.Time, bool) {
	if key == nil || !p.bal.byKey || d.Broker != Broker {
		return 0, time.Time{}, false
	}
	ps, _ := p.reg.Partitions(d)
	if ps == nil {
		return 0, time.Time{}, false
	}
	n := ps.Count()
	if n == 0 {
		return 0, time.Time{}, false
	}
	part := p.bal.inner.Balance(kafkago.Message{Topic: d.Name, Key: key}, p.allPartitions(n)...)
	return part, ps.RefusedUntil(part), true
}

var _ transport.PartitionRouter = (*Publisher)(nil)

// partitionMemo is the admissions of one call's partitions: a call's messages for one
// partition share its admission, so that a probe is a whole call.
type partitionMemo struct {
	parts []int
	errs  []error
}

func (m *partitionMemo) admit(ps *registry.Partitions, p int) error {
	for i, q := range m.parts {
		if q == p {
			return m.errs[i]
		}
	}
	err := ps.Admit(p)
	m.parts, m.errs = append(m.parts, p), append(m.errs, err)
	return err
}

// allCache is the Publisher's 0..n-1 list.
type allCache = atomic.Pointer[[]int]
