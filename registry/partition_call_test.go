package registry_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

var errNeutral = errors.New("message refused")

// partCall is a registry (threshold 2, partitions isolated after 2 failures) and the
// partitions of orders, which has 4.
type partCall struct {
	t     *testing.T
	clock *fakeclock.Clock
	r     *registry.Registry
	ps    *registry.Partitions
}

func newPartCall(t *testing.T, opts ...registry.Option) *partCall {
	t.Helper()
	clock := fakeclock.New(t0)
	r, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute, MaxInFlight: 100}}, append([]registry.Option{registry.WithClock(clock), registry.WithCallCounts(),
		registry.WithPartitionPolicy(registry.PartitionPolicy{Failures: 2, Isolation: time.Minute})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	pc := &partCall{t: t, clock: clock, r: r}
	if pc.ps, err = r.Partitions(orders); err != nil {
		t.Fatal(err)
	}
	if pc.ps != nil {
		pc.ps.SetCount(4)
	}
	return pc
}

// call sends messages bound for the partitions to (-1: not known), through Route,
// and fails the ones sendErr says; sent records the positions Send got.
func (pc *partCall) call(to []int, sendErr func(idx []int) error) (sent []int, err error) {
	err = pc.r.CallPartitioned(context.Background(), orders, registry.PartitionedCall{
		N: len(to),
		Classify: func(err error) breaker.Outcome {
			if errors.Is(err, errNeutral) {
				return breaker.Neutral
			}
			return breaker.Failure
		},
		Route: func(ps *registry.Partitions, parts []int) []error {
			var refused []error
			for i, p := range to {
				parts[i] = p
				if p >= 0 {
					if err := ps.Admit(p); err != nil {
						if refused == nil {
							refused = make([]error, len(to))
						}
						refused[i] = err
					}
				}
			}
			return refused
		},
		Send: func(_ context.Context, idx []int, _ []int) error {
			sent = slices.Clone(idx)
			if sendErr == nil {
				return nil
			}
			return sendErr(idx)
		},
	})
	return sent, err
}

func (pc *partCall) snapshot() breaker.Snapshot {
	s, ok := pc.r.Snapshot(orders)
	if !ok {
		pc.t.Fatal("no circuit")
	}
	return s
}

func failedIndexes(err error) []int {
	be, ok := errors.AsType[*transport.BatchError](err)
	if !ok {
		return nil
	}
	var out []int
	for _, f := range be.Failed {
		out = append(out, f.Index)
	}
	return out
}

// A failing partition is isolated by its own failures while the others answer, and
// the destination's circuit is not told a Failure; its messages are then refused by
// position, without being sent, and the others go out.
func TestCallPartitionedIsolatesOnePartition(t *testing.T) {
	pc := newPartCall(t)
	use(pc.ps, 4) // every partition written before
	for range 2 {
		_, err := pc.call([]int{1, 1}, func([]int) error { return errBroker })
		if err != errBroker {
			t.Fatalf("Send's error for all: %v", err)
		}
	}
	if s := pc.snapshot(); s.Failures != 0 || s.State != breaker.Closed || s.InFlight != 0 {
		t.Fatalf("circuit %+v; want no failure counted while partitions 0, 2 and 3 answer", s)
	}
	if iso := pc.ps.Isolated(); len(iso) != 1 || iso[0].Partition != 1 || iso[0].Failures != 2 {
		t.Fatalf("isolated %+v; want partition 1 after two calls (each counted once)", iso)
	}
	sent, err := pc.call([]int{0, 1, 2}, nil)
	if !slices.Equal(sent, []int{0, 2}) || !slices.Equal(failedIndexes(err), []int{1}) || !registry.IsPartitionRejection(err) {
		t.Fatalf("sent %v, error %v; want 0 and 2 sent, 1 refused", sent, err)
	}
	sent, err = pc.call([]int{1}, nil)
	if _, ok := errors.AsType[*registry.PartitionRejectedError](err); !ok || sent != nil {
		t.Fatalf("the only message to an isolated partition: %v (sent %v), want its PartitionRejectedError", err, sent)
	}
	sent, err = pc.call([]int{1, 1}, nil)
	if !slices.Equal(failedIndexes(err), []int{0, 1}) || sent != nil {
		t.Fatalf("every message refused: %v (sent %v)", err, sent)
	}
	if s := pc.snapshot(); s.Failures != 0 || s.InFlight != 0 {
		t.Fatalf("circuit %+v after refusals", s)
	}
	calls := pc.r.Report()[0].Calls
	if calls.Failed != 0 || calls.Published != 1 || calls.Neutral != 4 {
		t.Errorf("call counts %+v; want 1 published (2 of 3 sent), 4 neutral", calls)
	}
}

// A partial failure of a batch is mapped back from Send's positions to the call's,
// and a partition is told its messages' outcome once per call: a Failure among them.
func TestCallPartitionedMapsBatchPositions(t *testing.T) {
	pc := newPartCall(t)
	use(pc.ps, 4)                      // every partition written before
	pc.ps.Complete(0, breaker.Failure) // one more failure isolates 0
	pc.call([]int{0}, func([]int) error { return errBroker })
	// Partition 0 isolated: the call sends positions 1, 2, 3; Send fails its second.
	sent, err := pc.call([]int{0, 2, 3, 2}, func(idx []int) error {
		return &transport.BatchError{Failed: []transport.MessageError{{Index: 1, Err: errBroker}}}
	})
	if !slices.Equal(sent, []int{1, 2, 3}) || !slices.Equal(failedIndexes(err), []int{0, 2}) {
		t.Fatalf("sent %v, failed %v (%v); want positions 1-3 sent, 0 refused and 2 failed", sent, failedIndexes(err), err)
	}
	pc.call([]int{3, 3}, func([]int) error {
		return &transport.BatchError{Failed: []transport.MessageError{{Index: 0, Err: errBroker}, {Index: 2, Err: errBroker}}}
	})
	if iso := pc.ps.Isolated(); len(iso) != 2 || iso[1].Partition != 3 {
		t.Fatalf("isolated %+v; want 0 and 3 (two calls with a failure each)", iso)
	}
	if s := pc.snapshot(); s.Failures != 0 {
		t.Fatalf("circuit %+v; want no Failure while partitions answer", s)
	}
}

// Failures of messages whose partition is not known, or of the last answering
// partitions, count against the destination.
func TestCallPartitionedCountsTopicFailures(t *testing.T) {
	pc := newPartCall(t)
	pc.call([]int{-1, 0}, func([]int) error { return errBroker })
	if s := pc.snapshot(); s.Failures != 1 {
		t.Fatalf("circuit %+v; want the failure of a message of no known partition counted", s)
	}

	pc = newPartCall(t)
	pc.ps.SetCount(1)
	pc.call([]int{0}, func([]int) error { return errBroker })
	if s := pc.snapshot(); s.Failures != 1 {
		t.Fatalf("circuit %+v; want the failure of a topic's only partition counted", s)
	}
	if _, err := pc.call([]int{0, -1}, nil); err != nil {
		t.Fatalf("all published: %v", err)
	}
	if s := pc.snapshot(); s.Failures != 0 {
		t.Fatalf("circuit %+v; want a published call to reset the count", s)
	}
}

// A panic in Send completes the permit (Neutral) and frees the place of the probe
// the call took.
func TestCallPartitionedPanicCompletesThePermit(t *testing.T) {
	pc := newPartCall(t)
	use(pc.ps, 4) // every partition written before
	pc.call([]int{0}, func([]int) error { return errBroker })
	pc.call([]int{0}, func([]int) error { return errBroker })
	pc.clock.Advance(time.Minute)
	func() {
		defer func() { recover() }()
		pc.call([]int{0}, func([]int) error { panic("send") }) // Route takes 0's probe
	}()
	if s := pc.snapshot(); s.InFlight != 0 || s.Failures != 0 {
		t.Fatalf("circuit %+v after a panicking Send; want the permit completed Neutral", s)
	}
	if err := pc.ps.Admit(0); err != nil {
		t.Fatalf("the probe's place was not freed: %v", err)
	}
}

// Without partition evidence, or of no messages, CallPartitioned is CallHeld (all
// messages sent, failures counted at the destination), or ErrNoMessages.
func TestCallPartitionedWithoutEvidence(t *testing.T) {
	pc := newPartCall(t, registry.WithPartitionPolicy(registry.PartitionPolicy{Disabled: true}))
	sent, err := pc.call([]int{3, 3}, func([]int) error { return errBroker })
	if !errors.Is(err, errBroker) || !slices.Equal(sent, []int{0, 1}) {
		t.Fatalf("sent %v, error %v", sent, err)
	}
	if s := pc.snapshot(); s.Failures != 1 {
		t.Fatalf("circuit %+v; want the failure counted at the destination", s)
	}
	if _, err := pc.call(nil, nil); !errors.Is(err, registry.ErrNoMessages) {
		t.Fatalf("no messages: %v", err)
	}
}

// A partition is told a Success when one of its messages in a call went out and the
// others said nothing (Neutral): its streak of failures ends.
func TestCallPartitionedSuccessBesideNeutralEndsTheStreak(t *testing.T) {
	pc := newPartCall(t)
	pc.call([]int{3}, func([]int) error { return errBroker }) // streak 1 of 2
	pc.call([]int{3, 3}, func([]int) error {
		return &transport.BatchError{Failed: []transport.MessageError{{Index: 0, Err: errNeutral}}}
	})
	pc.call([]int{3}, func([]int) error { return errBroker })
	if iso := pc.ps.Isolated(); len(iso) != 0 {
		t.Fatalf("isolated %+v; a published message between the failures ended the streak", iso)
	}
}

// A nil Classify takes every error as a Failure; no messages is ErrNoMessages.
func TestCallPartitionedDefaults(t *testing.T) {
	pc := newPartCall(t)
	pc.ps.SetCount(1)
	err := pc.r.CallPartitioned(context.Background(), orders, registry.PartitionedCall{N: 1,
		Send: func(context.Context, []int, []int) error { return errBroker }})
	if err != errBroker {
		t.Fatalf("CallPartitioned: %v", err)
	}
	if s := pc.snapshot(); s.Failures != 1 {
		t.Fatalf("circuit %+v; want the error counted as a Failure", s)
	}
	if _, err := pc.call(nil, nil); !errors.Is(err, registry.ErrNoMessages) {
		t.Fatalf("no messages: %v", err)
	}
}
