package outbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// obRouterPub is a publisher that routes keyed messages to partitions the test
// controls: a key's partition is its first byte, refused until refused[p]; an
// unkeyed message has no partition. Each publish is recorded and answered by fn.
type obRouterPub struct {
	refused map[int]time.Time
	calls   [][]transport.Message
	fn      func(msgs []transport.Message) error
}

func (p *obRouterPub) Publish(_ context.Context, _ transport.Destination, msgs ...transport.Message) error {
	p.calls = append(p.calls, msgs)
	if p.fn == nil {
		return nil
	}
	return p.fn(msgs)
}

func (p *obRouterPub) PartitionOf(_ transport.Destination, key []byte) (int, time.Time, bool) {
	if key == nil {
		return 0, time.Time{}, false
	}
	return int(key[0]), p.refused[int(key[0])], true
}

// obRouterFixture is a fixture whose processor publishes through pub (not guarded:
// the test plays the publisher's part), every error an outage, no jitter.
func obRouterFixture(t *testing.T, pub *obRouterPub) *fixture {
	t.Helper()
	return routerFixtureWith(t, policy, outageOnError, pub)
}

// routerFixtureWith is obRouterFixture with circuits of policy p and errors judged
// by classify.
func routerFixtureWith(t *testing.T, p registry.Policy, classify func(error) breaker.Outcome, pub *obRouterPub) *fixture {
	t.Helper()
	f := newFixture(t, p)
	var err error
	f.proc, err = outbox.NewProcessor(f.store, f.reg, pub, outbox.WithClock(f.clock), outbox.WithClassifier(classify),
		outbox.WithDeferralJitter(0), outbox.WithRandom(func() float64 { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// obEnqueueKeys adds one row for orders per key (nil: unkeyed) and returns the ids.
func obEnqueueKeys(t *testing.T, f *fixture, keys ...[]byte) []int64 {
	t.Helper()
	var entries []outbox.Entry
	for _, k := range keys {
		entries = append(entries, outbox.Entry{Destination: orders, Message: transport.Message{Key: k, Value: []byte("v")}})
	}
	ids, err := f.store.Enqueue(context.Background(), entries...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// The rows of a partition that refuses calls are left leased, untouched; the other
// partitions' rows go out, one partition a publish; the destination is not held.
func TestRefusedPartitionsRowsAreLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keys  []byte // one row each; partition 1 refuses calls
		sizes []int  // the publishes
	}{
		{"two other partitions", []byte{0, 1, 2, 0}, []int{2, 1}},
		{"one other partition", []byte{0, 1}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := &obRouterPub{refused: map[int]time.Time{1: t0.Add(time.Minute)}}
			f := obRouterFixture(t, pub)
			var keys [][]byte
			for _, k := range tc.keys {
				keys = append(keys, []byte{k})
			}
			ids := obEnqueueKeys(t, f, keys...)
			rep := f.process(t)
			if c := rep.ByDestination[orders]; c.Published != len(tc.keys)-1 || c.Deferred != 0 {
				t.Errorf("counts %+v, want %d published and none deferred", c, len(tc.keys)-1)
			}
			if got := obSizes(pub.calls); !slices.Equal(got, tc.sizes) {
				t.Errorf("publishes of %v rows, want %v (partition by partition, partition 1 left out)", got, tc.sizes)
			}
			if r := f.get(t, ids[1]); r.Status != outbox.StatusPending || r.LeaseOwner == "" || r.Attempts != 0 || r.Deferrals != 0 {
				t.Errorf("refused partition's row: %s, lease %q, %d attempts, %d deferrals; want pending, leased, untouched", r.Status, r.LeaseOwner, r.Attempts, r.Deferrals)
			}
			if _, held := f.store.HeldUntil(orders); held {
				t.Error("the destination was held for one partition")
			}
		})
	}
}

// Rows all of one partition go out in one publish.
func TestOnePartitionsRowsGoOutTogether(t *testing.T) {
	pub := &obRouterPub{}
	f := obRouterFixture(t, pub)
	obEnqueueKeys(t, f, []byte{3}, []byte{3})
	if c := f.process(t).ByDestination[orders]; c.Published != 2 || len(pub.calls) != 1 {
		t.Errorf("counts %+v in %d publishes, want 2 in one", c, len(pub.calls))
	}
}

func obSizes(calls [][]transport.Message) []int {
	var out []int
	for _, c := range calls {
		out = append(out, len(c))
	}
	return out
}

// An outage of a publish through a partition router is the partitions' own (its
// rows left leased, the destination not held) only when a partition refused, or
// when every row has a partition and the destination's circuit admits calls; else
// the destination is held and the rows given back.
func TestPartitionOutageOrDestinationOutage(t *testing.T) {
	partRefusal := &registry.PartitionRejectedError{Destination: orders, Partition: 1, Err: &breaker.OpenError{NotBefore: t0.Add(time.Minute)}}
	cases := []struct {
		name  string
		key   []byte
		err   func(f *fixture) error
		alone bool // held alone: left leased, no hold
	}{
		{"a partition refused", []byte{1}, func(*fixture) error { return partRefusal }, true},
		{"every entry of a batch a partition's refusal", nil, func(*fixture) error {
			return &transport.BatchError{Destination: orders, Failed: []transport.MessageError{{Index: 0, Err: partRefusal}}}
		}, true},
		{"a partition's broker failed", []byte{1}, func(*fixture) error { return errBroker }, true},
		{"the destination's circuit refused", []byte{1}, func(*fixture) error {
			return &breaker.OpenError{NotBefore: t0.Add(time.Minute)}
		}, false},
		{"the destination's circuit opened on the failure", []byte{1}, func(f *fixture) error {
			f.forceOpen(t, orders, t0.Add(time.Minute))
			return errBroker
		}, false},
		{"an unkeyed row failed", nil, func(*fixture) error { return errBroker }, false},
		{"an empty batch error for an unkeyed row", nil, func(*fixture) error { return &transport.BatchError{Destination: orders} }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pub := &obRouterPub{}
			f := obRouterFixture(t, pub)
			pub.fn = func([]transport.Message) error { return tc.err(f) }
			ids := obEnqueueKeys(t, f, tc.key)
			rep, err := f.proc.ProcessPending(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			r := f.get(t, ids[0])
			_, held := f.store.HeldUntil(orders)
			if alone := r.LeaseOwner != "" && !held; alone != tc.alone {
				t.Errorf("row leased by %q, deferred %d times, destination held %v (counts %+v); want held alone %v",
					r.LeaseOwner, r.Deferrals, held, rep.ByDestination[orders], tc.alone)
			}
			if !tc.alone && r.Deferrals != 1 {
				t.Errorf("the row was deferred %d times, want once with the destination's hold", r.Deferrals)
			}
			if r.Attempts != 0 {
				t.Errorf("an outage spent %d attempts", r.Attempts)
			}
		})
	}
}
