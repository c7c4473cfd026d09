package registry_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
)

func TestPolicySetJSONRoundTrip(t *testing.T) {
	shadow := registry.DefaultPolicy()
	shadow.Circuit.Mode, shadow.Circuit.Scope = breaker.Shadow, breaker.SharedDependency
	set := registry.PolicySet{Default: registry.DefaultPolicy(), Overrides: map[string]registry.Policy{"kafka:orders": shadow}}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"BreakDuration":"550ms"`, `"Mode":"shadow"`, `"Scope":"SHARED_DEPENDENCY"`, `"kafka:orders"`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("%s does not contain %s", b, want)
		}
	}
	var back registry.PolicySet
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Default != set.Default || back.Overrides["kafka:orders"] != shadow || back.Fingerprint() != set.Fingerprint() {
		t.Fatalf("round trip changed the set:\n%+v\n%+v", back, set)
	}
}

func TestPolicySetJSONErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"Default": {"Circuit": {"FailureTreshold": 3}}}`, "Default: Circuit.FailureTreshold: unknown field"},
		{`{"Default": {"Circuit": {"BreakDuration": 5}}}`, "Circuit.BreakDuration: want a duration"},
		{`{"Default": {"Circuit": {"BreakDuration": "5 minutes"}}}`, "Circuit.BreakDuration"},
		{`{"Default": {}, "Overrides": {"kafka:a": {"Circuit": {"Mode": "loud"}}}}`, `override "kafka:a": Circuit.Mode: unknown value "loud"`},
		{`{"Default": {"MinCallBudget": "1s", "Admission": {"Limit": {"Max": "many"}}}}`, "Admission.Limit.Max: want a int"},
		{`{"Overrides": {}}`, "Default is missing"},
		{`{"Default": {}, "Extra": 1}`, "Extra"},
	} {
		var s registry.PolicySet
		err := json.Unmarshal([]byte(tc.in), &s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
	var s registry.PolicySet
	if err := json.Unmarshal([]byte(`{"Default": {"Circuit": {"FailureThreshold": 3, "BreakDuration": "2s"}}}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.Default.Circuit.BreakDuration != 2*time.Second || s.Default.Circuit.FailureThreshold != 3 {
		t.Fatalf("decoded %+v", s.Default.Circuit)
	}
}
