package sharedstate_test

// The package's test helpers: drivers that count, fail or hook their requests, and
// the circuits, records and permits the tests start from.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

var rulesT0 = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

// counting wraps a MemoryDriver, counts its requests by method, and can hold loads.
type counting struct {
	*circuittest.MemoryDriver
	mu      sync.Mutex
	calls   map[string]int
	onLoad  func() // when set, runs at the start of every Load (outside the lock)
	onReset func() // when set, runs at the start of every ResetFailures (outside the lock)
}

func newCounting() *counting {
	return &counting{MemoryDriver: &circuittest.MemoryDriver{}, calls: map[string]int{}}
}

func (d *counting) count(method string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[method]
}

func (d *counting) note(method string) {
	d.mu.Lock()
	d.calls[method]++
	d.mu.Unlock()
}

func (d *counting) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	d.note("load")
	d.mu.Lock()
	hook := d.onLoad
	d.mu.Unlock()
	if hook != nil {
		hook()
	}
	return d.MemoryDriver.Load(ctx, id)
}

func (d *counting) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	d.note("replace")
	return d.MemoryDriver.Replace(ctx, id, expect, next)
}

func (d *counting) AddFailure(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	d.note("add")
	return d.MemoryDriver.AddFailure(ctx, id, c)
}

func (d *counting) ResetFailures(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	d.note("reset")
	d.mu.Lock()
	hook := d.onReset
	d.mu.Unlock()
	if hook != nil {
		hook()
	}
	return d.MemoryDriver.ResetFailures(ctx, id, c)
}

func ruleCircuit(t *testing.T, d sharedstate.Driver, clock *fakeclock.Clock, edit func(*sharedstate.Config)) *sharedstate.Circuit {
	t.Helper()
	cfg := sharedstate.Config{Identity: "kafka:orders", Scope: breaker.SharedDependency,
		Policy: breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 3, BreakDuration: time.Minute},
		Driver: d, Clock: clock, MaxStaleness: time.Second, RetryDelay: time.Second}
	if edit != nil {
		edit(&cfg)
	}
	c, err := sharedstate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func outcome(t *testing.T, c *sharedstate.Circuit, o breaker.Outcome) bool {
	t.Helper()
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return p.Complete(o)
}

// flakyDriver is a replace-only driver over a MemoryDriver that counts requests and can
// fail loads or make every replace conflict.
type flakyDriver struct {
	m        *circuittest.MemoryDriver
	mu       sync.Mutex
	loads    int
	replaces int
	loadErr  error // returned by Load when set
	conflict bool  // every Replace returns ErrConflict
}

func newFlakyDriver() *flakyDriver { return &flakyDriver{m: &circuittest.MemoryDriver{}} }

func (h *flakyDriver) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	h.mu.Lock()
	h.loads++
	err := h.loadErr
	h.mu.Unlock()
	if err != nil {
		return sharedstate.Record{}, err
	}
	return h.m.Load(ctx, id)
}

func (h *flakyDriver) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	h.mu.Lock()
	h.replaces++
	conflict := h.conflict
	h.mu.Unlock()
	if conflict {
		return sharedstate.ErrConflict
	}
	return h.m.Replace(ctx, id, expect, next)
}

func (h *flakyDriver) failLoads(err error) {
	h.mu.Lock()
	h.loadErr = err
	h.mu.Unlock()
}

func (h *flakyDriver) counts() (loads, replaces int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.loads, h.replaces
}

// stored returns the record of the test circuit.
func (h *flakyDriver) stored(t *testing.T) sharedstate.Record {
	t.Helper()
	r, err := h.m.Load(context.Background(), "kafka:orders")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// flakyCounter is flakyDriver with the MemoryDriver's Counter, whose AddFailure can be
// made to conflict.
type flakyCounter struct {
	*flakyDriver
	addConflict bool
}

func (h *flakyCounter) AddFailure(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	if h.addConflict {
		return sharedstate.Record{}, sharedstate.ErrConflict
	}
	return h.m.AddFailure(ctx, id, c)
}

func (h *flakyCounter) ResetFailures(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return h.m.ResetFailures(ctx, id, c)
}

// editRecord stores the record of the test circuit after edit, one version on, as
// another replica's write would.
func editRecord(t *testing.T, m *circuittest.MemoryDriver, edit func(*sharedstate.Record)) sharedstate.Record {
	t.Helper()
	r, err := m.Load(context.Background(), ordersID)
	if err != nil {
		t.Fatal(err)
	}
	edit(&r)
	r.Version++
	m.Set(ordersID, r)
	return r
}

// mustAcquire returns the permit Acquire gives, failing the test on a refusal.
func mustAcquire(t *testing.T, c *sharedstate.Circuit) breaker.Permit {
	t.Helper()
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return p
}

// openThenProbe opens c with three failures, waits out the break and returns the probe
// admitted then.
func openThenProbe(t *testing.T, c *sharedstate.Circuit, clock *fakeclock.Clock) breaker.Permit {
	t.Helper()
	for range 3 {
		outcome(t, c, breaker.Failure)
	}
	if s := c.Snapshot(); s.State != breaker.Open {
		t.Fatalf("after 3 failures: %+v; want open", s)
	}
	clock.Advance(time.Minute)
	p := mustAcquire(t, c)
	if !p.Probe() {
		t.Fatal("the call after the break is no probe")
	}
	return p
}

const ordersID = "kafka:orders"

var errTimeout = errors.New("i/o timeout")

// hookedDriver is a counting driver whose Replace a test can take over: hook runs
// instead of the store's Replace when it is set, and may call through to it.
type hookedDriver struct {
	*counting
	hmu  sync.Mutex
	hook func(ctx context.Context, expect uint64, next sharedstate.Record) error
}

func newHookedDriver() *hookedDriver { return &hookedDriver{counting: newCounting()} }

func (d *hookedDriver) setHook(f func(ctx context.Context, expect uint64, next sharedstate.Record) error) {
	d.hmu.Lock()
	d.hook = f
	d.hmu.Unlock()
}

func (d *hookedDriver) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	d.hmu.Lock()
	hook := d.hook
	d.hmu.Unlock()
	if hook != nil {
		d.note("replace")
		return hook(ctx, expect, next)
	}
	return d.counting.Replace(ctx, id, expect, next)
}

// once runs f on the first Replace only, and lets the later ones through.
func (d *hookedDriver) once(f func(ctx context.Context, expect uint64, next sharedstate.Record) error) {
	d.setHook(func(ctx context.Context, expect uint64, next sharedstate.Record) error {
		d.setHook(nil)
		return f(ctx, expect, next)
	})
}

// storedRecord returns the test circuit's stored record (a read the counts do not
// include).
func storedRecord(t *testing.T, m *circuittest.MemoryDriver) sharedstate.Record {
	t.Helper()
	r, err := m.Load(context.Background(), ordersID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// trippedRecord stores a closed record with the threshold of failures reached but not yet
// opened (as a Counter leaves it), and makes it the circuit's snapshot.
func trippedRecord(t *testing.T, d *counting, c *sharedstate.Circuit) sharedstate.Record {
	t.Helper()
	r := editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 3 })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

func openError(t *testing.T, err error) *breaker.OpenError {
	t.Helper()
	var oe *breaker.OpenError
	if !errors.As(err, &oe) {
		t.Fatalf("got %v; want an *breaker.OpenError", err)
	}
	return oe
}

// agedCircuit returns a circuit over d made an hour before clock's time, so that its
// readings of the clock are not zero.
func agedCircuit(t *testing.T, d sharedstate.Driver, clock *fakeclock.Clock, edit func(*sharedstate.Config)) *sharedstate.Circuit {
	t.Helper()
	c := ruleCircuit(t, d, clock, edit)
	clock.Advance(time.Hour)
	return c
}

// freshCircuit returns a circuit over d whose snapshot was read at clock's time, an hour
// after the circuit was made (so that ages are differences of two nonzero readings).
func freshCircuit(t *testing.T, d sharedstate.Driver, clock *fakeclock.Clock, edit func(*sharedstate.Config)) *sharedstate.Circuit {
	t.Helper()
	c := agedCircuit(t, d, clock, edit)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// tripCircuit opens c with three failures (the threshold of ruleCircuit's policy).
func tripCircuit(t *testing.T, c *sharedstate.Circuit) {
	t.Helper()
	for range 3 {
		outcome(t, c, breaker.Failure)
	}
}

// acquireNeutral acquires and completes the call as Neutral, reporting whether it was admitted.
func acquireNeutral(c *sharedstate.Circuit) (bool, error) {
	p, err := c.Acquire(context.Background())
	if err != nil {
		return false, err
	}
	p.Complete(breaker.Neutral)
	return true, nil
}

// keepLocalCircuit is a KeepLocal circuit (threshold 3, break a minute doubling to at
// most 8, RetryDelay a second) that reports its transitions to seen.
func keepLocalCircuit(t *testing.T, d sharedstate.Driver, clock *fakeclock.Clock, seen *transitions, edit func(*sharedstate.Config)) *sharedstate.Circuit {
	t.Helper()
	return ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		cfg.Policy.MaxBreakDuration = 8 * time.Minute
		cfg.Policy.HalfOpenRetryDelay = 5 * time.Second
		cfg.Observers = []func(breaker.Transition){seen.observe}
		if edit != nil {
			edit(cfg)
		}
	})
}

// openedUntil returns the NotBefore of an open rejection, failing the test for any
// other answer.
func openedUntil(t *testing.T, c *sharedstate.Circuit, what string) time.Time {
	t.Helper()
	p, err := c.Acquire(context.Background())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) {
		if err == nil {
			p.Complete(breaker.Neutral)
		}
		t.Fatalf("%s: Acquire = %v; want an *OpenError", what, err)
	}
	return oe.NotBefore
}

// wantTransition fails unless the last transition seen is from → to for reason.
func wantTransition(t *testing.T, seen *transitions, n int, from, to breaker.State, reason string) {
	t.Helper()
	seen.mu.Lock()
	got := len(seen.seen)
	seen.mu.Unlock()
	last := seen.last()
	if got != n || last.From != from || last.To != to || last.Reason != reason || last.Identity != "kafka:orders" {
		t.Fatalf("transition %d: %+v (of %d); want %v -> %v for %s", n, last, got, from, to, reason)
	}
}

// refusedFailure makes c's store refuse writes and completes one failure, which c
// then keeps locally; the refusal is at the clock's time.
func refusedFailure(t *testing.T, c *sharedstate.Circuit, d *counting) {
	t.Helper()
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	if !outcome(t, c, breaker.Failure) {
		t.Fatal("the refused failure was not kept here")
	}
}

// transitions records what a replica's observer is told.
type transitions struct {
	mu   sync.Mutex
	seen []breaker.Transition
}

func (o *transitions) observe(t breaker.Transition) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, t)
}

func (o *transitions) last() breaker.Transition {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		return breaker.Transition{}
	}
	return o.seen[len(o.seen)-1]
}

// esAcquire and esEdit are the names limit_*_test.go uses (they go with limit.go).
var esAcquire, esEdit = mustAcquire, editRecord

// rampRefusal reports whether err is a ramping circuit's refusal.
func rampRefusal(err error) bool {
	oe, ok := errors.AsType[*breaker.OpenError](err)
	return ok && oe.Ramping
}
