package filestate_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// holdLock takes the circuit's file lock as another process would, and returns the
// function that releases it.
func holdLock(t *testing.T, e *env, id string) func() {
	t.Helper()
	lock, err := os.OpenFile(strings.TrimSuffix(e.statePath(id), ".json")+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { lock.Close() }
}

// A process holding the lock cannot keep Acquire past the caller's
// context; the caller is refused when its context ends, while the lock is still held.
func TestLockHolderCannotStallAcquirePastItsContext(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	for range 3 {
		call(t, c, breaker.Failure)
	}
	e.clock.Advance(time.Minute) // the break is over: the next Acquire writes half-open
	unlock := holdLock(t, e, "kafka:orders")
	var released atomic.Bool
	// Without a bound on the wait, Acquire returns only once the holder lets go.
	stop := time.AfterFunc(5*time.Second, func() { released.Store(true); unlock() })
	defer func() {
		if stop.Stop() {
			unlock()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	p, err := c.Acquire(ctx)
	if released.Load() {
		t.Fatal("Acquire waited for the lock holder, past its context")
	}
	if err == nil {
		p.Complete(breaker.Neutral)
		t.Fatal("Acquire admitted a call without the lock")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v; want the context's deadline", err)
	}
}

// A writer killed between creating its temporary file and renaming it
// leaves the file behind; the next write under the lock removes it.
func TestTemporaryFilesOfKilledWritersAreRemoved(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	other := e.circuit("kafka:payments", policy)
	call(t, c, breaker.Failure)
	call(t, other, breaker.Failure)
	name := strings.TrimSuffix(filepath.Base(e.statePath("kafka:orders")), ".json")
	otherName := strings.TrimSuffix(filepath.Base(e.statePath("kafka:payments")), ".json")
	for i := range 3 {
		for _, n := range []string{name, otherName} {
			if err := os.WriteFile(filepath.Join(e.root, "."+n+".tmp-"+strconv.Itoa(i)), []byte(`{"form`), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	call(t, c, breaker.Failure) // a write under kafka:orders' lock
	if left, _ := filepath.Glob(filepath.Join(e.root, "."+name+".tmp-*")); len(left) != 0 {
		t.Fatalf("temporary files left after a write: %q", left)
	}
	if left, _ := filepath.Glob(filepath.Join(e.root, "."+otherName+".tmp-*")); len(left) != 3 {
		t.Fatalf("another circuit's temporary files (whose lock was not held) were touched: %q", left)
	}
}

// WithIOTimeout bounds the wait for another process's lock even when the caller's
// context would wait longer. Under FailClosed the call is then refused as
// unavailable; under KeepLocal (the default) the process decides on its own evidence
// and says it is degraded. Either way the caller is not stalled.
func TestLockTimeoutBoundsTheWaitForALock(t *testing.T) {
	for _, mode := range []sharedstate.StoreFailure{sharedstate.FailClosed, sharedstate.KeepLocal} {
		e := newEnv(t)
		c := e.circuit("kafka:orders", policy, sharedstate.WithIOTimeout(50*time.Millisecond), sharedstate.WithStoreFailure(mode))
		for range 3 {
			call(t, c, breaker.Failure)
		}
		e.clock.Advance(time.Minute) // the break is over: the next Acquire writes half-open
		unlock := holdLock(t, e, "kafka:orders")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		p, err := c.Acquire(ctx)
		switch {
		case ctx.Err() != nil:
			t.Errorf("mode %v: Acquire waited out the caller's minute: %v", mode, err)
		case mode == sharedstate.FailClosed && !errors.Is(err, breaker.ErrUnavailable):
			t.Errorf("FailClosed: Acquire = %v; want ErrUnavailable within the lock timeout", err)
		case mode == sharedstate.KeepLocal && (err != nil || c.Snapshot().DegradedSince.IsZero()):
			t.Errorf("KeepLocal: Acquire = %v, degraded since %v; want a local decision, reported as degraded", err, c.Snapshot().DegradedSince)
		}
		if err == nil {
			p.Complete(breaker.Neutral)
		}
		cancel()
		unlock()
	}
	e := newEnv(t)
	if _, err := filestate.Open(e.root, sharedstate.WithIOTimeout(0)); err == nil {
		t.Error("WithIOTimeout(0) accepted")
	}
}
