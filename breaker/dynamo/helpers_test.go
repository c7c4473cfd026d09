package dynamo

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

const (
	testID    = "kafka:orders"
	testTable = "circuits"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// gen0 is the first generation (and version) of an item created at t0: they start at
// the clock, so a re-created item never reuses an old one's.
var gen0 = uint64(t0.UnixNano())

// sharedPolicy opens after 3 consecutive failures for 10s; probes hold a 5s lease.
func sharedPolicy() breaker.Policy {
	return breaker.Policy{
		FailureThreshold:   3,
		BreakDuration:      10 * time.Second,
		ProbeLease:         5 * time.Second,
		HalfOpenRetryDelay: time.Second,
		Scope:              breaker.SharedDependency,
	}
}

// fleet is n replicas sharing one memStore and one fake clock. Their snapshots go
// stale after one second (the default), and a failed request is retried after one
// second.
type fleet struct {
	t   *testing.T
	st  *memStore
	clk *fakeclock.Clock
	r   []*Circuit
}

func newFleet(t *testing.T, n int, p breaker.Policy, opts ...Option) *fleet {
	t.Helper()
	f := &fleet{t: t, st: newMemStore(), clk: fakeclock.New(t0)}
	for i := range n {
		f.r = append(f.r, f.replica(p, append([]Option{sharedstate.WithOwner("replica-" + strconv.Itoa(i))}, opts...)...))
	}
	return f
}

func (f *fleet) replica(p breaker.Policy, opts ...Option) *Circuit {
	f.t.Helper()
	c, err := newCircuit(f.st, testTable, testID, p, append([]Option{sharedstate.WithClock(f.clk)}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// item returns the stored item.
func (f *fleet) item() sharedstate.Record {
	f.t.Helper()
	it, err := f.st.get(testID)
	if err != nil {
		f.t.Fatal(err)
	}
	return it
}

func mustAcquire(t *testing.T, c *Circuit) breaker.Permit {
	t.Helper()
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("%s: Acquire: %v; want a permit", c.Owner(), err)
	}
	return p
}

func mustReject(t *testing.T, c *Circuit) *breaker.OpenError {
	t.Helper()
	p, err := c.Acquire(context.Background())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) {
		if err == nil {
			p.Complete(breaker.Neutral)
		}
		t.Fatalf("%s: Acquire = %v; want an *OpenError", c.Owner(), err)
	}
	if oe.Identity != testID || oe.Scope != breaker.SharedDependency {
		t.Fatalf("OpenError identity/scope = %q/%v; want %q/%v", oe.Identity, oe.Scope, testID, breaker.SharedDependency)
	}
	return oe
}

func mustUnavailable(t *testing.T, c *Circuit) *UnavailableError {
	t.Helper()
	_, err := c.Acquire(context.Background())
	var ue *UnavailableError
	if !errors.Is(err, breaker.ErrUnavailable) || !errors.As(err, &ue) {
		t.Fatalf("Acquire = %v; want an *UnavailableError matching breaker.ErrUnavailable", err)
	}
	if ue.Identity != testID || ue.Table != testTable {
		t.Fatalf("UnavailableError names %q/%q; want %q/%q", ue.Identity, ue.Table, testID, testTable)
	}
	return ue
}

// fail records n failures through c, one permit each.
func fail(t *testing.T, c *Circuit, n int) {
	t.Helper()
	for range n {
		if !mustAcquire(t, c).Complete(breaker.Failure) {
			t.Fatalf("%s: Complete(Failure) = false; want true", c.Owner())
		}
	}
}

// openFleet opens the shared circuit with the fleet's first replica and returns the
// open deadline.
func (f *fleet) open() time.Time {
	f.t.Helper()
	fail(f.t, f.r[0], sharedPolicy().FailureThreshold)
	it := f.item()
	if it.State != breaker.Open {
		f.t.Fatalf("state after %d failures = %v; want open", sharedPolicy().FailureThreshold, it.State)
	}
	return time.Unix(0, it.OpenUntil)
}

// testFingerprint is the fingerprint sharedPolicy's replicas store.
func testFingerprint() string {
	fp, _ := sharedstate.Fingerprint(sharedPolicy())
	return fp
}
