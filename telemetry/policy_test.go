package telemetry_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
)

func TestPolicyVersionGauge(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second}
	e := newEnv(t, p, nil)
	want := func(v float64) {
		t.Helper()
		got, ok := e.collect().series["brokerguard.policy.version{}"]
		if got != v || ok != (v > 0) {
			t.Fatalf("brokerguard.policy.version %v (present %v), want %v", got, ok, v)
		}
	}
	want(0) // absent under the policies the registry started with
	p.FailureThreshold = 4
	if _, _, err := e.reg.ApplyPolicies(registry.PolicyChange{Set: registry.PolicySet{Default: registry.Policy{Circuit: p}}, Author: "ann", Reason: "tune"}); err != nil {
		t.Fatal(err)
	}
	want(2)
}
