package registry_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A call whose messages failed on one partition while the others answer tells the
// destination's circuit Success when some of its messages were published, else
// Neutral: the failure is that partition's evidence alone.
func TestCallPartitionedPartialFailureIsASuccessForTheTopic(t *testing.T) {
	pc := newPartCall(t)
	_, err := pc.call([]int{0, 1}, func([]int) error {
		return &transport.BatchError{Destination: orders, Failed: []transport.MessageError{{Index: 0, Err: errBroker}}}
	})
	if got := failedIndexes(err); len(got) != 1 || got[0] != 0 {
		t.Fatalf("error %v, want message 0 failed", err)
	}
	if c := pc.r.Report()[0].Calls; c.Published != 1 || c.Neutral != 0 || c.Failed != 0 {
		t.Fatalf("one of two published: counts %+v, want one published", c)
	}
	if _, err := pc.call([]int{0, 0}, func([]int) error { return errBroker }); err != errBroker {
		t.Fatal(err)
	}
	if c := pc.r.Report()[0].Calls; c.Published != 1 || c.Neutral != 1 || c.Failed != 0 {
		t.Fatalf("none published: counts %+v, want one neutral more", c)
	}
	if s := pc.snapshot(); s.Failures != 0 {
		t.Fatalf("the circuit counted %d failures of one partition", s.Failures)
	}
}

var errPgGone = errors.New("topic deleted")

// An Unusable outcome of a partitioned call marks the destination unusable, as Call
// does; a Success clears the mark. A destination without a circuit has no snapshot.
func TestCallPartitionedNotesAnUnusableDestination(t *testing.T) {
	pc := newPartCall(t)
	send := func(err error) error {
		return pc.r.CallPartitioned(t.Context(), orders, registry.PartitionedCall{
			N: 1,
			Classify: func(err error) breaker.Outcome {
				if errors.Is(err, errPgGone) {
					return breaker.Unusable
				}
				return breaker.Failure
			},
			Route: func(_ *registry.Partitions, parts []int) []error { parts[0] = 3; return nil },
			Send:  func(context.Context, []int, []int) error { return err },
		})
	}
	if err := send(errPgGone); err != errPgGone {
		t.Fatal(err)
	}
	if s := pc.snapshot(); s.Unusable != backend.ErrorText(errPgGone) || !s.UnusableSince.Equal(t0) {
		t.Fatalf("after an Unusable call: %q since %v, want %q since %v", s.Unusable, s.UnusableSince, backend.ErrorText(errPgGone), t0)
	}
	if err := send(nil); err != nil {
		t.Fatal(err)
	}
	if s := pc.snapshot(); s.Unusable != "" {
		t.Fatalf("after a Success: still unusable %q", s.Unusable)
	}
	if _, ok := pc.r.Snapshot(refunds); ok {
		t.Fatal("Snapshot of a destination without a circuit reported one")
	}
}

// NoteOutcome marks and clears a live destination's unusable mark, and creates no
// circuit for another.
func TestNoteOutcomeMarksTheDestination(t *testing.T) {
	r := newRegistry(t)
	if _, err := r.Circuit(orders); err != nil {
		t.Fatal(err)
	}
	r.NoteOutcome(orders, breaker.Unusable, errPgGone)
	if s, ok := r.Snapshot(orders); !ok || s.Unusable != backend.ErrorText(errPgGone) {
		t.Fatalf("NoteOutcome(Unusable): %q, %v", s.Unusable, ok)
	}
	r.NoteOutcome(refunds, breaker.Unusable, errPgGone)
	if _, ok := r.Lookup(refunds); ok {
		t.Fatal("NoteOutcome created a circuit")
	}
	r.NoteOutcome(orders, breaker.Rejected, errBadMsg)
	if s, _ := r.Snapshot(orders); s.Unusable != "" {
		t.Fatalf("a Rejected message did not clear the mark: %q", s.Unusable)
	}
}

// pgHangPartitioned makes one partitioned call of one message to partition 0 that
// hangs until ctx's deadline, with the client's hold given.
func pgHangPartitioned(t *testing.T, r *registry.Registry, deadline, hold time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	err := r.CallPartitioned(ctx, orders, registry.PartitionedCall{
		N: 1, Hold: hold, Classify: classify,
		Route: func(_ *registry.Partitions, parts []int) []error { parts[0] = 0; return nil },
		Send: func(ctx context.Context, _, _ []int) error {
			<-ctx.Done()
			return ctx.Err()
		},
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung partitioned call: %v", err)
	}
}

// The deadline rule of a partitioned call asks for the budget beyond the client's
// hold, as CallHeld does.
func TestCallPartitionedAsksTheBudgetBeyondTheHold(t *testing.T) {
	for _, tc := range []struct {
		deadline     time.Duration
		wantFailures int
	}{
		{time.Second, 0},
		{1500 * time.Millisecond, 1},
	} {
		synctest.Test(t, func(t *testing.T) {
			r := newRegistry(t, registry.WithPartitionPolicy(registry.PartitionPolicy{Failures: 5, Isolation: time.Minute}))
			pgHangPartitioned(t, r, tc.deadline, time.Second)
			if s := r.Snapshots()[orders]; s.Failures != tc.wantFailures {
				t.Fatalf("deadline %v after a 1s hold: %d failures, want %d", tc.deadline, s.Failures, tc.wantFailures)
			}
		})
	}
}

// A cold limited circuit's first wave of partitioned calls that miss their deadlines
// is no verdict, as for guarded calls; the next wave opens it.
func TestCallPartitionedColdFirstWaveIsNoVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}, Admission: admission.DefaultPolicy()}),
			registry.WithPartitionPolicy(registry.PartitionPolicy{Failures: 100, Isolation: time.Minute}))
		ps, err := r.Partitions(orders)
		if err != nil || ps == nil {
			t.Fatalf("partitions: %v, %v", ps, err)
		}
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() { pgHangPartitioned(t, r, 200*time.Millisecond, 0) })
		}
		wg.Wait()
		if s := r.Snapshots()[orders]; s.State != breaker.Closed || s.Failures != 0 {
			t.Fatalf("after a cold first wave: %v with %d failures, want closed with none", s.State, s.Failures)
		}
		for range 3 {
			pgHangPartitioned(t, r, 200*time.Millisecond, 0)
		}
		if s := r.Snapshots()[orders]; s.State != breaker.Open {
			t.Fatalf("a partitioned destination hung from the start: %v after the second wave, want open", s.State)
		}
	})
}
