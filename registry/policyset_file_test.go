package registry_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/registry"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPolicyFileAppliesEdits(t *testing.T) {
	e := newPolicyEnv(t, circuitPolicy(2, time.Minute))
	path := filepath.Join(t.TempDir(), "policies.json")
	f := registry.NewPolicyFile(e.r, path, nil)
	poll := func(wantApplied bool, wantErr string) {
		t.Helper()
		applied, err := f.Poll()
		if applied != wantApplied || (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("Poll = %v, %v; want %v and an error containing %q", applied, err, wantApplied, wantErr)
		}
	}
	poll(false, "policies.json") // no file yet: an error naming it

	writeFile(t, path, `{"Default": {"Circuit": {"FailureThreshold": 4, "BreakDuration": "1m"}}}`)
	poll(true, "")
	v := e.r.Policies()
	if v.Version != 2 || v.Author != "file:"+path || e.r.Policy(orders).Circuit.FailureThreshold != 4 {
		t.Fatalf("after the first poll %+v", v)
	}
	poll(false, "") // unchanged

	writeFile(t, path, `{"Default": {"Circuit": {"FailureThreshold": 4}}}`)
	poll(false, "BreakDuration") // invalid: reported, and the set in force stays
	poll(false, "")              // reported once
	if e.r.Policies().Version != 2 {
		t.Fatal("an invalid file changed the policies")
	}

	writeFile(t, path, `{"Default": {"Circuit": {"FailureThreshold": 4, "BreakDuration": "60s"}}}`)
	poll(false, "") // new content, same set: no new version
	writeFile(t, path, `{"Default": {"Circuit": {"FailureThreshold": 5, "BreakDuration": "1m"}},
		"Overrides": {"kafka:orders": {"Circuit": {"FailureThreshold": 1, "BreakDuration": "10s"}}}}`)
	poll(true, "")
	if v := e.r.Policies().Version; v != 3 || e.r.Policy(orders).Circuit.FailureThreshold != 1 {
		t.Fatalf("after the override: version %d, orders threshold %d", v, e.r.Policy(orders).Circuit.FailureThreshold)
	}
}

// Poll also reverts an expired temporary version: a service that runs a PolicyFile
// needs nothing else for expiries.
func TestPolicyFilePollExpires(t *testing.T) {
	e := newPolicyEnv(t, circuitPolicy(2, time.Minute))
	path := filepath.Join(t.TempDir(), "policies.json")
	writeFile(t, path, `{"Default": {"Circuit": {"FailureThreshold": 2, "BreakDuration": "1m"}}}`)
	f := registry.NewPolicyFile(e.r, path, nil)
	if _, _, err := e.r.ApplyPolicies(registry.PolicyChange{Set: registry.PolicySet{Default: circuitPolicy(7, time.Minute)},
		Author: "ann", Reason: "incident", Expires: e.clock.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	if _, err := f.Poll(); err != nil {
		t.Fatal(err)
	}
	if v := e.r.Policies(); v.Author != "expiry" || e.r.Policy(orders).Circuit.FailureThreshold != 2 {
		t.Fatalf("after the expiry %+v", v)
	}
}

func TestPolicyFileRunReportsOnce(t *testing.T) {
	e := newPolicyEnv(t, circuitPolicy(2, time.Minute))
	path := filepath.Join(t.TempDir(), "policies.json")
	writeFile(t, path, `{"Default": {"Circuit": {"FailureThreshold": 0}}}`)
	var reported []error
	f := registry.NewPolicyFile(e.r, path, func(err error) { reported = append(reported, err) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one poll, then Run returns
	if err := f.Run(ctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "FailureThreshold") {
		t.Fatalf("reported %v", reported)
	}
	if err := f.Run(ctx, 0); err == nil {
		t.Fatal("Run accepted a zero interval")
	}
}
