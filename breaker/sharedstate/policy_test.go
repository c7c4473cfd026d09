package sharedstate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// A mismatch names the fields that differ; one against a record without a
// description (an older release's) names the two fingerprints instead.
func TestPolicyMismatchErrorNamesFieldsOrFingerprints(t *testing.T) {
	bare := (&sharedstate.PolicyMismatchError{Identity: "kafka:orders", Stored: "aaa", Ours: "bbb"}).Error()
	if !strings.Contains(bare, "fingerprint aaa, ours bbb") || !strings.Contains(bare, `"kafka:orders"`) {
		t.Errorf("without fields: %q; want both fingerprints and the circuit", bare)
	}
	named := (&sharedstate.PolicyMismatchError{Identity: "kafka:orders", Stored: "aaa", Ours: "bbb",
		Fields: []string{"FailureThreshold: stored 3, ours 4"}}).Error()
	if !strings.Contains(named, "FailureThreshold: stored 3, ours 4") || strings.Contains(named, "fingerprint aaa") {
		t.Errorf("with fields: %q; want the fields instead of the fingerprints", named)
	}
}

// A PolicyMismatchError is ErrPolicyMismatch and nothing else.
func TestPolicyMismatchErrorIsOnlyItsSentinel(t *testing.T) {
	err := error(&sharedstate.PolicyMismatchError{Identity: "kafka:orders"})
	if !errors.Is(err, sharedstate.ErrPolicyMismatch) || errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("errors.Is: mismatch %v, ErrOpen %v; want true, false",
			errors.Is(err, sharedstate.ErrPolicyMismatch), errors.Is(err, breaker.ErrOpen))
	}
}
