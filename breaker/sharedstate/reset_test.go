package sharedstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// A Success whose reset could not be written leaves the failures standing; the next
// Success must send the reset again, or failures that were not consecutive open the
// circuit.
func TestFailedResetIsSentAgain(t *testing.T) {
	for name, wrap := range map[string]func(*circuittest.MemoryDriver) sharedstate.Driver{
		"Counter":     func(m *circuittest.MemoryDriver) sharedstate.Driver { return m },
		"ReplaceOnly": func(m *circuittest.MemoryDriver) sharedstate.Driver { return replaceOnly{m} },
	} {
		t.Run(name, func(t *testing.T) {
			store := &circuittest.MemoryDriver{}
			c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Scope: breaker.SharedDependency,
				Policy: breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 3, BreakDuration: time.Minute},
				Driver: wrap(store), RetryDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			call := func(o breaker.Outcome) bool {
				t.Helper()
				p, err := c.Acquire(context.Background())
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				return p.Complete(o)
			}
			call(breaker.Failure)
			call(breaker.Failure)
			store.Down(errDown)
			p, err := c.Acquire(context.Background()) // on the snapshot
			if err != nil {
				t.Fatal(err)
			}
			if p.Complete(breaker.Success) {
				t.Fatal("a reset that could not be written counted")
			}
			store.Down(nil)
			call(breaker.Success)
			call(breaker.Failure)
			if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 1 {
				t.Fatalf("after F F S(lost) S F: %v with %d failures; want closed with 1", s.State, s.Failures)
			}
		})
	}
}
