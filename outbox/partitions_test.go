package outbox_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

var errPartitionDown = errors.New("fake: partition leader down")

// partitionedPublisher is a Kafka-like publisher over registry.CallPartitioned: a
// key's partition is its first byte modulo n, and the partitions in dead fail.
type partitionedPublisher struct {
	reg *registry.Registry
	n   int

	mu       sync.Mutex
	dead     map[int]bool
	reached  map[int]int      // calls that reached each partition
	sent     map[string][]int // values published, by key, in order
	refusals int
}

func (f *partitionedPublisher) part(key []byte) int { return int(key[0]) % f.n }

func (f *partitionedPublisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f.reg.CallPartitioned(ctx, d, registry.PartitionedCall{
		N:        len(msgs),
		Classify: func(err error) breaker.Outcome { return breaker.Failure },
		Route: func(ps *registry.Partitions, parts []int) []error {
			ps.SetCount(f.n)
			var refused []error
			decided := map[int]error{}
			for i, m := range msgs {
				p := f.part(m.Key)
				parts[i] = p
				err, ok := decided[p]
				if !ok {
					err = ps.Admit(p)
					decided[p] = err
				}
				if err != nil {
					if refused == nil {
						refused = make([]error, len(msgs))
					}
					refused[i] = err
					f.mu.Lock()
					f.refusals++
					f.mu.Unlock()
				}
			}
			return refused
		},
		Send: func(_ context.Context, idx []int, parts []int) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			be := &transport.BatchError{Destination: d}
			seen := map[int]bool{}
			for j, i := range idx {
				p := parts[i]
				if !seen[p] {
					seen[p] = true
					f.reached[p]++
				}
				if f.dead[p] {
					be.Failed = append(be.Failed, transport.MessageError{Index: j, Err: errPartitionDown})
					continue
				}
				f.sent[string(msgs[i].Key)] = append(f.sent[string(msgs[i].Key)], int(msgs[i].Value[0]))
			}
			if len(be.Failed) == 0 {
				return nil
			}
			return be
		},
	})
}

func (f *partitionedPublisher) PartitionOf(d transport.Destination, key []byte) (int, time.Time, bool) {
	ps, _ := f.reg.Partitions(d)
	if ps == nil || ps.Count() == 0 || key == nil {
		return 0, time.Time{}, false
	}
	p := f.part(key)
	return p, ps.RefusedUntil(p), true
}

// The rows of a dead partition are held alone: the healthy partitions' rows go out,
// the dead ones' stay pending with no attempt spent and no destination hold, the
// publisher is not called for them while isolated, and once the partition is back
// they go out in their keys' order.
func TestPartitionHeldAlone(t *testing.T) {
	f := newFixture(t, policy)
	pub := &partitionedPublisher{reg: f.reg, n: 6, dead: map[int]bool{1: true, 4: true}, reached: map[int]int{}, sent: map[string][]int{}}
	proc, err := outbox.NewProcessor(f.store, f.reg, pub, outbox.WithClock(f.clock), outbox.WithBatchSize(60),
		outbox.WithClassifier(func(err error) breaker.Outcome {
			if errors.Is(err, errPartitionDown) {
				return breaker.Failure
			}
			return breaker.Neutral
		}))
	if err != nil {
		t.Fatal(err)
	}
	// 150 rows: 30 keys, 5 rows a key (values 0..4), key i bound for partition i%6;
	// the 10 keys of partitions 1 and 4 have 50 rows.
	var entries []outbox.Entry
	for v := range 5 {
		for k := range 30 {
			entries = append(entries, outbox.Entry{Destination: orders, Message: transport.Message{Key: []byte{byte(k)}, Value: []byte{byte(v)}}})
		}
	}
	if _, err := f.store.Enqueue(context.Background(), entries...); err != nil {
		t.Fatal(err)
	}
	deadRows := func() (pending, attempts int) {
		for _, r := range f.store.Records() {
			if pub.part(r.Message.Key)%3 == 1 { // partitions 1 and 4
				if r.Status == outbox.StatusPending {
					pending++
				}
				attempts += r.Attempts
			}
		}
		return
	}
	for range 20 {
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Second)
	}
	healthy := 0
	for k, vs := range pub.sent {
		if pub.part([]byte(k))%3 != 1 {
			healthy += len(vs)
		}
	}
	if healthy != 100 {
		t.Fatalf("%d of the 100 healthy partitions' rows published in 20 rounds", healthy)
	}
	if pending, attempts := deadRows(); pending != 50 || attempts != 0 {
		t.Fatalf("dead partitions: %d of 50 rows pending, %d attempts spent; want 50 and 0", pending, attempts)
	}
	if _, held := f.store.HeldUntil(orders); held {
		t.Fatal("the destination was held for two partitions")
	}
	if s := f.reg.Snapshots()[orders]; s.State != breaker.Closed {
		t.Fatalf("the destination's circuit is %v", s.State)
	}
	reachedWhileDead := pub.reached[1] + pub.reached[4]
	// Each dead partition is reached by the calls that isolate it (3) and by one probe
	// per isolation (1 minute) at most: none in these 20 s.
	if reachedWhileDead > 6 {
		t.Fatalf("the dead partitions were reached %d times, want <= 6", reachedWhileDead)
	}

	pub.mu.Lock()
	pub.dead = map[int]bool{}
	pub.mu.Unlock()
	for range 30 {
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(10 * time.Second)
	}
	if pending, attempts := deadRows(); pending != 0 || attempts != 0 {
		t.Fatalf("after the partitions returned: %d rows pending, %d attempts spent", pending, attempts)
	}
	for k, vs := range pub.sent {
		if !slices.Equal(vs, []int{0, 1, 2, 3, 4}) {
			t.Fatalf("key %x published as %v, want each row once in order", k, vs)
		}
	}
	if len(pub.sent) != 30 {
		t.Fatalf("%d keys published, want 30", len(pub.sent))
	}
}
