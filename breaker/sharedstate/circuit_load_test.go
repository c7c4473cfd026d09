package sharedstate_test

// What a read installs (circuit.go: load, install, newView, Snapshot): the fresh record
// that replaces a tombstone, a record created again, a slow read that must not undo a
// newer one, one ramp per closed generation, and the degraded state shown without a
// snapshot.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// The record that replaces a tombstone starts past both its version and its
// generation, even when they are ahead of the clock and apart, so that nothing from
// before the removal can match it.
func TestRecordAfterATombstoneStartsPastItsVersionAndGeneration(t *testing.T) {
	for name, edit := range map[string]func(*sharedstate.Record){
		"version ahead":    func(r *sharedstate.Record) { r.Version += 10 },
		"generation ahead": func(r *sharedstate.Record) { r.Generation += 10 },
	} {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newHookedDriver()
			c := agedCircuit(t, d, clock, nil)
			tomb := sharedstate.Tombstone(uint64(clock.Now().Add(time.Hour).UnixNano()), clock.Now().UnixNano())
			edit(&tomb)
			d.Set(ordersID, tomb)
			if err := c.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			if r := storedRecord(t, d.MemoryDriver); r.Version <= tomb.Version || r.Generation <= tomb.Generation {
				t.Fatalf("record after the tombstone %+v: %+v; want version and generation past its", tomb, r)
			}
		})
	}
}

// Snapshot without a snapshot (Forget dropped it) still shows that the store
// refuses this replica's writes.
func TestSnapshotWithoutAReadShowsTheRefusal(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := freshCircuit(t, d, clock, nil)
	trippedRecord(t, d.counting, c)
	d.RefuseWrites(errOOM)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("tripped, opening refused: %v", err)
	}
	c.Forget()
	if s := c.Snapshot(); s.DegradedSince.IsZero() || s.State != breaker.Open {
		t.Fatalf("Snapshot after Forget while the store refuses writes: %+v; want degraded and open here", s)
	}
}

// heldLoad is a driver whose next Load, once armed, reads the record and then waits
// for release before answering: a slow read overtaken by a later one.
type heldLoad struct {
	*circuittest.MemoryDriver
	mu       sync.Mutex
	armed    bool
	read     chan struct{}
	released chan struct{}
}

func (h *heldLoad) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	r, err := h.MemoryDriver.Load(ctx, id)
	h.mu.Lock()
	hold := h.armed
	h.armed = false
	h.mu.Unlock()
	if hold {
		close(h.read)
		<-h.released
	}
	return r, err
}

// Two reads of one replica overlap, and the later one, which saw the circuit opened by
// another replica, answers first. The earlier read's older record must not replace
// it: the replica would admit calls on a closed circuit it knows is open, and its
// observers would see the generation go back.
func TestSlowReadDoesNotUndoANewerOne(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	store := &circuittest.MemoryDriver{}
	slow := &heldLoad{MemoryDriver: store, read: make(chan struct{}), released: make(chan struct{})}
	p := breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 1, BreakDuration: time.Minute}
	var seen []breaker.Transition
	c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Policy: p, Scope: breaker.SharedDependency,
		Driver: slow, Clock: clock, RetryDelay: -1, Observers: []func(breaker.Transition){func(tr breaker.Transition) { seen = append(seen, tr) }}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Policy: p, Scope: breaker.SharedDependency,
		Driver: store, Clock: clock, RetryDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}

	slow.mu.Lock()
	slow.armed = true
	slow.mu.Unlock()
	done := make(chan error)
	go func() { done <- c.ClearOverride(context.Background()) }() // reads, finds nothing to clear
	<-slow.read                                                   // it has read the closed record

	permit, err := other.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	permit.Complete(breaker.Failure) // the other replica opens the circuit
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.State != breaker.Open {
		t.Fatalf("after the refresh: %v, want open", s.State)
	}
	close(slow.released)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.State != breaker.Open {
		t.Errorf("the slow read's closed record replaced the open one: %+v", s)
	}
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("Acquire on a circuit the replica saw open: %v, want a rejection", err)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].Generation <= seen[i-1].Generation {
			t.Errorf("observer saw generation %d after %d: %+v", seen[i].Generation, seen[i-1].Generation, seen)
		}
	}
}

// A slow read does not undo a newer closed record (circuit.go: install). Amnesia
// repair (amnesia.go) rereads the store when a read finds a record older than an open
// snapshot; over a closed snapshot only install's rule keeps the newer view.

// A read that found the circuit open answers after the replica wrote a ForceClose: the
// replica keeps admitting, and its observers never see the generation go back.
func TestSlowReadDoesNotUndoTheReplicasForceClose(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	store := &circuittest.MemoryDriver{}
	slow := &heldLoad{MemoryDriver: store, read: make(chan struct{}), released: make(chan struct{})}
	var seen transitions
	c := ruleCircuit(t, slow, clock, func(cfg *sharedstate.Config) {
		cfg.Policy.FailureThreshold = 1
		cfg.Observers = []func(breaker.Transition){seen.observe}
	})
	other := ruleCircuit(t, store, clock, func(cfg *sharedstate.Config) { cfg.Policy.FailureThreshold = 1 })
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, other).Complete(breaker.Failure) // the other replica opens the circuit

	slow.mu.Lock()
	slow.armed = true
	slow.mu.Unlock()
	done := make(chan error)
	go func() { done <- c.Refresh(ctx) }() // reads the open record
	<-slow.read

	if err := c.ForceClose(ctx, clock.Now().Add(10*time.Minute)); err != nil { // reads and writes
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.Override != breaker.ForcedClosed {
		t.Fatalf("after ForceClose: %v %v; want closed by the operator", s.State, s.Override)
	}
	close(slow.released)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.Override != breaker.ForcedClosed {
		t.Errorf("the slow read's open record replaced the replica's newer ForceClose: %v %v", s.State, s.Override)
	}
	if ok, err := acquireNeutral(c); !ok {
		t.Errorf("Acquire on a circuit the replica saw force-closed: %v; want admitted", err)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for i := 1; i < len(seen.seen); i++ {
		if seen.seen[i].Generation <= seen.seen[i-1].Generation {
			t.Errorf("observer saw generation %d after %d: %+v", seen.seen[i].Generation, seen.seen[i-1].Generation, seen.seen)
		}
	}
}

// One ramp per closed generation (circuit.go: newView): a replica that reads the
// record again during a ramp keeps the ramp it had, so that its decisions go on where
// they were, and a replica whose first read finds a ramp running joins it.

// rampDecisions makes n calls on c and returns them as a string of 'a' (admitted)
// and 'r' (turned away by the ramp).
func rampDecisions(t *testing.T, c *sharedstate.Circuit, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		p, err := c.Acquire(context.Background())
		switch {
		case err == nil:
			p.Complete(breaker.Neutral)
			b.WriteByte('a')
		case rampRefusal(err):
			b.WriteByte('r')
		default:
			t.Fatalf("call %d during the ramp: %v; want admitted or a ramp refusal", i, err)
		}
	}
	return b.String()
}

// rampingCircuit returns a circuit that reads the record on every Acquire (a negative
// MaxStaleness) and has not read it yet, over a record that another replica closed by
// a probe 5 s ago, half way through a 10 s ramp: the ramp admits half the calls.
func rampingCircuit(t *testing.T) *sharedstate.Circuit {
	t.Helper()
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	ramp := func(cfg *sharedstate.Config) { cfg.Policy.RampDuration = 10 * time.Second }
	other := ruleCircuit(t, d, clock, ramp)
	if err := other.Refresh(context.Background()); err != nil { // creates the record
		t.Fatal(err)
	}
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.Generation += 3 // opened, half-open, closed by a probe
		r.Reason, r.Since = breaker.ReasonProbeSucceeded, clock.Now().Add(-5*time.Second).UnixNano()
	})
	return ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		ramp(cfg)
		cfg.MaxStaleness = -1
	})
}

// A replica whose first read finds the fleet ramping ramps too: at a share of one
// half it turns calls away.
func TestFirstReadDuringARampJoinsIt(t *testing.T) {
	c := rampingCircuit(t)
	if got := rampDecisions(t, c, 20); !strings.Contains(got, "r") {
		t.Fatalf("20 calls of a replica that first read the record half way through the ramp: %s; want some turned away", got)
	}
}

// Reading the record again does not start the ramp's decisions afresh: they go on
// along one Weyl sequence, which at a share of one half never admits, nor turns away,
// three calls in a row (its points step by the golden ratio, 0.618 modulo 1). Decisions
// started afresh at each read from a random seed are coin tosses: 100 of them without
// such a run have a chance below 1e-9.
func TestRampDecisionsGoOnAcrossReads(t *testing.T) {
	c := rampingCircuit(t)
	got := rampDecisions(t, c, 100)
	for _, run := range []string{"aaa", "rrr"} {
		if i := strings.Index(got, run); i >= 0 {
			t.Fatalf("100 calls at a ramp share of one half, each reading the record: %s; %q at call %d: the decisions started afresh at a read",
				got, run, i)
		}
	}
}

// A record removed and created again starts its version and generation at the clock,
// never at 1, so no snapshot or permit from before the removal can match it.
func TestRecreatedRecordStartsAtTheClock(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	old, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d.Forget() // the circuit is closed: nothing to write back
	clock.Advance(time.Minute)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := d.Load(context.Background(), "kafka:orders")
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(clock.Now().UnixNano()); r.Generation != want || r.Version != want {
		t.Fatalf("re-created record: version %d, generation %d; want both %d (the clock)", r.Version, r.Generation, want)
	}
	if old.Complete(breaker.Failure) {
		t.Fatal("a permit from before the removal counted")
	}
}
