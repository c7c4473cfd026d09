package filestate_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// policy opens after three consecutive failures for one minute.
var policy = breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute, Scope: breaker.SingleHost}

const staleness = 100 * time.Millisecond

// env is a root directory with a fake clock. Each store opened on it stands for one
// process; they share the clock so that the tests decide when time passes.
type env struct {
	t     *testing.T
	root  string
	clock *fakeclock.Clock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{t: t, root: filepath.Join(t.TempDir(), "circuits"), clock: fakeclock.New(t0)}
}

// store opens another "process" on the root.
func (e *env) store(opts ...filestate.Option) *filestate.Store {
	e.t.Helper()
	opts = append([]filestate.Option{sharedstate.WithClock(e.clock), sharedstate.WithMaxStaleness(staleness)}, opts...)
	s, err := filestate.Open(e.root, opts...)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	return s
}

// circuit opens a new store and returns its circuit id under p.
func (e *env) circuit(id string, p breaker.Policy, opts ...filestate.Option) *filestate.Circuit {
	e.t.Helper()
	c, err := e.store(opts...).Circuit(id, p)
	if err != nil {
		e.t.Fatalf("Circuit(%q): %v", id, err)
	}
	return c
}

// statePath is where the record of id lives.
func (e *env) statePath(id string) string {
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(e.root, hex.EncodeToString(sum[:])+".json")
}

func acquire(t *testing.T, c breaker.Circuit) breaker.Permit {
	t.Helper()
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return p
}

// call acquires and completes one call, which must count.
func call(t *testing.T, c breaker.Circuit, o breaker.Outcome) {
	t.Helper()
	if !acquire(t, c).Complete(o) {
		t.Fatalf("Complete(%v) of a fresh permit returned false", o)
	}
}

func rejected(t *testing.T, c breaker.Circuit) *breaker.OpenError {
	t.Helper()
	_, err := c.Acquire(context.Background())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Acquire: got %v, want an *OpenError", err)
	}
	if oe.Scope != breaker.SingleHost {
		t.Fatalf("rejection scope %v, want %v", oe.Scope, breaker.SingleHost)
	}
	return oe
}

func wantState(t *testing.T, c breaker.Circuit, want breaker.State) breaker.Snapshot {
	t.Helper()
	s := c.Snapshot()
	if s.State != want {
		t.Fatalf("state %v, want %v (snapshot %+v)", s.State, want, s)
	}
	return s
}

// unavailable asserts that Acquire fails closed with an error matching all of want.
func unavailable(t *testing.T, c breaker.Circuit, want ...error) error {
	t.Helper()
	p, err := c.Acquire(context.Background())
	if err == nil {
		p.Complete(breaker.Neutral)
		t.Fatal("Acquire admitted a call")
	}
	for _, w := range append([]error{breaker.ErrUnavailable}, want...) {
		if !errors.Is(err, w) {
			t.Fatalf("Acquire: %v; want errors.Is %v", err, w)
		}
	}
	return err
}
