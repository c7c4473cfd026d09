package sharedstate_test

// Rules of the engine that were caught only by other packages' tests, or by none
// (issue 33); each test here fails when its rule is broken.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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

// The read that several callers wait for serves them all: the caller that started it
// cancelling its context must not fail the others.
func TestSharedReadOutlivesItsFirstCaller(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	d.onLoad = func() {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
	}
	leaderCtx, cancel := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() { leader <- c.Refresh(leaderCtx) }()
	<-started
	waiter := make(chan error, 1)
	go func() { waiter <- c.Refresh(context.Background()) }()
	waitForJoin(t)
	cancel()
	close(release)
	<-leader
	if err := <-waiter; err != nil {
		t.Fatalf("a caller waiting on a read whose first caller cancelled: %v; want the read's result", err)
	}
}

// waitForJoin returns once a goroutine waits in refresh for the read in flight (its
// stack shows it parked in refresh's select), so that the test is about a waiter.
func waitForJoin(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[select") && strings.Contains(g, "sharedstate.(*Circuit).refresh(") {
				return
			}
		}
	}
	t.Fatal("no caller joined the read in flight")
}

// A soft refresh that took longer than MaxStaleness must not admit on the clock
// reading from before it: the snapshot is stale by then.
func TestSoftRefreshDecidesOnTheClockAfterIt(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.RetryDelay = -1 })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(800 * time.Millisecond) // past three quarters: the next Acquire refreshes softly
	d.onLoad = func() {
		clock.Advance(time.Second) // the read takes a second...
		d.Down(errDown)            // ...and fails
	}
	if p, err := c.Acquire(context.Background()); err == nil {
		p.Complete(breaker.Neutral)
		t.Fatal("admitted on a snapshot that was 1.8 s old when the refresh ended (MaxStaleness 1 s)")
	}
}

// After a failed write the circuit leaves the store alone for RetryDelay (under both
// store-failure modes), then tries again.
func TestWritesWaitRetryDelay(t *testing.T) {
	for name, mode := range map[string]sharedstate.StoreFailure{"KeepLocal": sharedstate.KeepLocal, "FailClosed": sharedstate.FailClosed} {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newCounting()
			c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.OnStoreFailure = mode; cfg.MaxStaleness = time.Minute })
			permits := make([]breaker.Permit, 3)
			for i := range permits {
				p, err := c.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				permits[i] = p
			}
			d.RefuseWrites(errOOM)
			permits[0].Complete(breaker.Failure)
			if d.count("add") != 1 {
				t.Fatalf("%d writes for the first failure; want 1", d.count("add"))
			}
			clock.Advance(900 * time.Millisecond)
			permits[1].Complete(breaker.Failure)
			if d.count("add") != 1 {
				t.Fatalf("%d writes within RetryDelay of a refused one; want still 1", d.count("add"))
			}
			clock.Advance(200 * time.Millisecond)
			permits[2].Complete(breaker.Failure)
			if d.count("add") != 2 {
				t.Fatalf("%d writes after RetryDelay; want 2", d.count("add"))
			}
		})
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

// Over a driver without a Counter, the failure that reaches the threshold opens the
// circuit in the same write, and not one failure before it.
func TestReplacePathOpensAtTheThreshold(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, replaceOnly{d.MemoryDriver}, clock, nil)
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure)
	if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 2 {
		t.Fatalf("after 2 of 3 failures: %+v; want closed with 2", s)
	}
	outcome(t, c, breaker.Failure)
	r, _ := d.Load(context.Background(), "kafka:orders")
	if r.State != breaker.Open {
		t.Fatalf("stored after the third failure: %+v; want open", r)
	}
}

// A burst of successes after a failure sends one reset, not one each.
func TestResetIsSentOncePerVersion(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	outcome(t, c, breaker.Failure)
	permits := make([]breaker.Permit, 10)
	for i := range permits {
		p, err := c.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		permits[i] = p
	}
	// The first reset is held in flight while the other nine successes complete: they
	// must count on it rather than send their own.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	d.onReset = func() {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
	}
	var counted atomic.Int32
	done := make(chan struct{})
	go func() {
		if permits[0].Complete(breaker.Success) {
			counted.Add(1)
		}
		close(done)
	}()
	<-entered
	for _, p := range permits[1:] {
		if p.Complete(breaker.Success) {
			counted.Add(1)
		}
	}
	close(release)
	<-done
	if got := d.count("reset"); got != 1 {
		t.Fatalf("%d resets for a burst of 10 successes; want 1", got)
	}
	if counted.Load() != 10 {
		t.Fatalf("%d of 10 successes counted; want all", counted.Load())
	}
}

// Under an override, outcomes change nothing: a ForceClose does not count failures,
// and writes nothing for them.
func TestOutcomesUnderAnOverrideChangeNothing(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	if err := c.ForceClose(context.Background(), clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	writes := d.count("add") + d.count("replace")
	for range 5 {
		if outcome(t, c, breaker.Failure) {
			t.Fatal("a failure under ForceClose counted")
		}
	}
	if got := d.count("add") + d.count("replace") - writes; got != 0 {
		t.Fatalf("%d writes for failures under ForceClose; want 0", got)
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 0 {
		t.Fatalf("after 5 failures under ForceClose: %+v; want closed with none", s)
	}
	if _, err := c.Acquire(context.Background()); errors.Is(err, breaker.ErrOpen) {
		t.Fatal("ForceClose did not hold")
	}
}
