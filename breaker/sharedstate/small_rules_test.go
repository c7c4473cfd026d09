package sharedstate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// A PolicyMismatchError is ErrPolicyMismatch and nothing else.
func TestPolicyMismatchErrorIsOnlyItsSentinel(t *testing.T) {
	err := error(&sharedstate.PolicyMismatchError{Identity: "kafka:orders"})
	if !errors.Is(err, sharedstate.ErrPolicyMismatch) || errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("errors.Is: mismatch %v, ErrOpen %v; want true, false",
			errors.Is(err, sharedstate.ErrPolicyMismatch), errors.Is(err, breaker.ErrOpen))
	}
}

// The owner written into probe leases is the configured one; without one, a name of
// this process.
func TestOwnerIsTheConfiguredOne(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c := ruleCircuit(t, newCounting(), clock, func(cfg *sharedstate.Config) { cfg.Owner = "replica-7" })
	if c.Owner() != "replica-7" {
		t.Errorf("Owner() = %q, want the configured replica-7", c.Owner())
	}
	if c := ruleCircuit(t, newCounting(), clock, nil); c.Owner() == "" {
		t.Error("no owner without a configured one")
	}
}

// A record whose probe leases have a zero or repeated ID is refused by Check, naming
// the lease.
func TestRecordCheckRefusesBadLeaseIDs(t *testing.T) {
	for _, ids := range [][]uint64{{0}, {3, 3}} {
		r := sharedstate.Record{Version: 5, Fingerprint: "fp", State: breaker.HalfOpen, Generation: 5, Since: 1}
		for _, id := range ids {
			r.Leases = append(r.Leases, sharedstate.Lease{ID: id, Owner: "o", Expires: 2})
		}
		if err := r.Check("kafka:orders"); err == nil || !strings.Contains(err.Error(), "Leases[") {
			t.Errorf("leases %v: Check = %v, want an error naming the lease", ids, err)
		}
	}
}
