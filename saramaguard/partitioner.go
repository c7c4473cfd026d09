package saramaguard

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Partitioner returns a sarama partitioner constructor, for
// Config.Producer.Partitioner, that keeps the partition evidence of reg's circuits
// (registry.Partitions) in sarama's choices, in the spirit of the Java producer's
// adaptive partitioning (KIP-794). It asks the partitioner inner makes (sarama's
// default NewHashPartitioner when nil) and
//
//   - refuses a keyed message that must keep its partition (inner requires
//     consistency for it) when that partition is isolated: sarama fails the message
//     before it is sent, with a *registry.PartitionRejectedError;
//   - moves any other message to the next partition that is not isolated, when
//     inner chose an isolated one.
//
// NewSyncProducer installs it by default; give it to a config of your own for
// sarama's AsyncProducer, with the same registry.
func Partitioner(reg *registry.Registry, inner sarama.PartitionerConstructor) sarama.PartitionerConstructor {
	if inner == nil {
		inner = sarama.NewHashPartitioner
	}
	constructors.Store(reg, inner)
	return newPartitioner(reg, inner)
}

// newPartitioner is Partitioner's constructor, apart so that isPartitioner can know
// its code.
func newPartitioner(reg *registry.Registry, inner sarama.PartitionerConstructor) sarama.PartitionerConstructor {
	return func(topic string) sarama.Partitioner {
		ps, _ := reg.Partitions(transport.Destination{Broker: Broker, Name: topic})
		return &partitioner{ps: ps, inner: inner(topic)}
	}
}

// partitionerCode is the code of every constructor newPartitioner returns: Go funcs
// cannot be compared, but closures of one function literal share their code.
var partitionerCode = reflect.ValueOf(newPartitioner(nil, nil)).Pointer()

// isPartitioner reports whether ctor was made by Partitioner.
func isPartitioner(ctor sarama.PartitionerConstructor) bool {
	return ctor != nil && reflect.ValueOf(ctor).Pointer() == partitionerCode
}

type partitioner struct {
	ps    *registry.Partitions // nil when the registry keeps no partition evidence
	inner sarama.Partitioner
}

var _ sarama.DynamicConsistencyPartitioner = (*partitioner)(nil)

func (p *partitioner) RequiresConsistency() bool { return p.inner.RequiresConsistency() }

// MessageRequiresConsistency asks inner, as sarama would.
func (p *partitioner) MessageRequiresConsistency(m *sarama.ProducerMessage) bool {
	if d, ok := p.inner.(sarama.DynamicConsistencyPartitioner); ok {
		return d.MessageRequiresConsistency(m)
	}
	return p.inner.RequiresConsistency()
}

// Partition implements sarama.Partitioner. sarama gives a message that requires
// consistency all the topic's partitions, so that a choice is the partition
// itself; others get the writable partitions only, which are the partitions
// themselves only when all are writable (n is the topic's count).
func (p *partitioner) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	pick, err := p.inner.Partition(m, n)
	if err != nil || p.ps == nil || pick < 0 || pick >= n {
		return pick, err
	}
	consistent := p.MessageRequiresConsistency(m)
	if consistent {
		p.ps.SetCount(int(n))
	}
	if consistent && m.Key != nil {
		if err := p.ps.Admit(int(pick)); err != nil {
			return -1, err
		}
		return pick, nil
	}
	if int(n) == p.ps.Count() {
		part, _ := p.ps.Route(int(pick), int(n), false)
		return int32(part), nil
	}
	return pick, nil
}

// sendPartitioned sends msgs, all to d, under d's circuit and its partitions'
// evidence (registry.CallPartitioned): one message with SendMessage, several with
// SendMessages. It returns what CallPartitioned returns; partition, offset are the
// single message's.
func (s *SyncProducer) sendPartitioned(ctx context.Context, d transport.Destination, msgs []*sarama.ProducerMessage) (partition int32, offset int64, err error) {
	partition, offset = -1, -1
	err = s.reg.CallPartitioned(ctx, d, registry.PartitionedCall{
		N: len(msgs), Classify: s.classify,
		Send: func(_ context.Context, _ []int, parts []int) error {
			s.mu.RLock()
			defer s.mu.RUnlock()
			if s.closed {
				return ErrClosed
			}
			// A message that failed before sarama partitioned it keeps the
			// Partition it had: it is then told to no partition.
			before := make([]int32, len(msgs))
			for i, m := range msgs {
				before[i] = m.Partition
			}
			attribute := func(i int, err error) {
				if err == nil || !registry.IsPartitionRejection(err) && msgs[i].Partition != before[i] {
					parts[i] = int(msgs[i].Partition)
				}
			}
			if len(msgs) == 1 {
				var err error
				partition, offset, err = s.p.SendMessage(msgs[0])
				attribute(0, err)
				return err
			}
			err := s.p.SendMessages(msgs)
			var perrs sarama.ProducerErrors
			if err != nil && !errors.As(err, &perrs) {
				return err
			}
			failed := map[*sarama.ProducerMessage]error{}
			for _, pe := range perrs {
				failed[pe.Msg] = pe.Err
			}
			var be *transport.BatchError
			for i, m := range msgs {
				e, isFailed := failed[m]
				attribute(i, e)
				if isFailed {
					if be == nil {
						be = &transport.BatchError{Destination: d}
					}
					be.Failed = append(be.Failed, transport.MessageError{Index: i, Err: e})
				}
			}
			if be == nil {
				return nil
			}
			return be
		},
	})
	return partition, offset, err
}

// constructors holds, per registry, the inner constructor last given to Partitioner
// with it: a SyncProducer cannot see its sarama producer's configuration, and asks
// this to place keys for PartitionOf.
var constructors sync.Map // *registry.Registry -> sarama.PartitionerConstructor

// keyer is a partitioner PartitionOf asks, apart from sarama's own.
type keyer struct {
	mu sync.Mutex // guards p, which need not be safe for concurrent use
	p  sarama.Partitioner
}

// PartitionOf implements transport.PartitionRouter for the outbox: the partition
// the partitioner given to Partitioner with the SyncProducer's registry gives key,
// when it keeps keys to partitions and the topic's partition count is known.
func (s *SyncProducer) PartitionOf(d transport.Destination, key []byte) (int, time.Time, bool) {
	if key == nil || d.Broker != Broker {
		return 0, time.Time{}, false
	}
	ctor, ok := constructors.Load(s.reg)
	if !ok {
		return 0, time.Time{}, false
	}
	ps, _ := s.reg.Partitions(d)
	if ps == nil || ps.Count() == 0 {
		return 0, time.Time{}, false
	}
	n := ps.Count()
	k, _ := s.keyers.Load(d.Name)
	if k == nil {
		k, _ = s.keyers.LoadOrStore(d.Name, &keyer{p: ctor.(sarama.PartitionerConstructor)(d.Name)})
	}
	kp := k.(*keyer)
	m := &sarama.ProducerMessage{Topic: d.Name, Key: sarama.ByteEncoder(key)}
	kp.mu.Lock()
	consistent := kp.p.RequiresConsistency()
	if dc, ok := kp.p.(sarama.DynamicConsistencyPartitioner); ok {
		consistent = dc.MessageRequiresConsistency(m)
	}
	var part int32
	var err error
	if consistent {
		part, err = kp.p.Partition(m, int32(n))
	}
	kp.mu.Unlock()
	if !consistent || err != nil || part < 0 || int(part) >= n {
		return 0, time.Time{}, false
	}
	return int(part), ps.RefusedUntil(int(part)), true
}

var _ transport.PartitionRouter = (*SyncProducer)(nil)
