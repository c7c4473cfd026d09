package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// policyServer serves a registry whose kafka:payments circuit has one failure of two,
// through an admin handler with the mutation token and an audit log.
func policyServer(t *testing.T) (*registry.Registry, string, func() []admin.AuditEvent) {
	t.Helper()
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	down := func(context.Context) error { return errors.New("broker down") }
	if err := reg.Call(context.Background(), transport.Destination{Broker: "kafka", Name: "payments"}, 1, nil, down); err == nil {
		t.Fatal("the failing call succeeded")
	}
	var mu sync.Mutex
	var audits []admin.AuditEvent
	h, err := admin.New(reg, admin.WithMutations(testToken), admin.WithAudit(func(_ context.Context, e admin.AuditEvent) {
		mu.Lock()
		audits = append(audits, e)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return reg, srv.URL, func() []admin.AuditEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]admin.AuditEvent(nil), audits...)
	}
}

func TestPolicyCommand(t *testing.T) {
	clearSourceEnv(t)
	reg, url, audits := policyServer(t)
	file := filepath.Join(t.TempDir(), "set.json")
	set := `{"Default": {"Circuit": {"FailureThreshold": 1, "BreakDuration": "30s"}}}`
	if err := os.WriteFile(file, []byte(set), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := "--token=" + testToken

	// Token rules, for each change: none is a usage error, a wrong one is refused.
	for _, args := range [][]string{{"dry-run", file}, {"apply", file, "--reason", "r", "--author", "ann"}, {"rollback", "1", "--reason", "r", "--author", "ann"}} {
		if _, errOut, code := runCLI("policy", append(args, "--url", url)...); code != 2 || !strings.Contains(errOut, "--token") {
			t.Fatalf("%v without a token: exit %d, %q", args, code, errOut)
		}
		if out, errOut, code := runCLI("policy", append(args, "--url", url, "--token", testToken+"x")...); code != 4 || out != "" || !strings.Contains(errOut, "401") {
			t.Fatalf("%v with a wrong token: exit %d, out %q, err %q", args, code, out, errOut)
		}
	}
	if reg.Policies().Version != 1 {
		t.Fatal("a refused command changed the policies")
	}

	out, errOut, code := runCLI("policy", "dry-run", file, "--url", url, tok)
	if code != 0 || !strings.Contains(out, "kafka:payments") || !strings.Contains(out, "opens on next failure") ||
		!strings.Contains(out, "Circuit.FailureThreshold") {
		t.Fatalf("dry-run: exit %d\n%s%s", code, out, errOut)
	}
	if reg.Policies().Version != 1 {
		t.Fatal("the dry run changed the policies")
	}

	out, errOut, code = runCLI("policy", "apply", file, "--url", url, tok, "--reason", "payments flapping", "--author", "ann", "--expires-in", "2h")
	if code != 0 || !strings.Contains(out, "version 2") {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if v := reg.Policies(); v.Version != 2 || v.Author != "ann" || v.Expires.IsZero() || reg.Policy(transport.Destination{Broker: "kafka", Name: "payments"}).Circuit.FailureThreshold != 1 {
		t.Fatalf("in force after apply: %+v", v)
	}

	out, errOut, code = runCLI("policy", "show", "--url", url, "--json")
	var shown admin.Policies
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.Active.Version != 2 || len(shown.History) != 2 {
		t.Fatalf("show --json: exit %d\n%s%s", code, out, errOut)
	}

	out, errOut, code = runCLI("policy", "rollback", "1", "--url", url, tok, "--reason", "too tight", "--author", "bob")
	if code != 0 || !strings.Contains(out, "version 3") {
		t.Fatalf("rollback: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runCLI("policy", "rollback", "7", "--url", url, tok, "--reason", "r", "--author", "bob"); code != 4 || !strings.Contains(errOut, "version") {
		t.Fatalf("rollback to a version not kept: exit %d, %q", code, errOut)
	}

	t.Setenv("BROKERGUARD_ADMIN_URL", url) // the flags' environment variables
	out, _, code = runCLI("policy", "history")
	if code != 0 || !strings.Contains(out, "bob") || !strings.Contains(out, "ann") || !strings.Contains(out, "registry.New") {
		t.Fatalf("history: exit %d\n%s", code, out)
	}

	// The audit log has one line per change, refusals included, with who and which version.
	var applied, rolledBack, refused int
	for _, a := range audits() {
		switch {
		case a.Err != "":
			refused++
		case a.Action == "policy-apply" && a.Author == "ann" && a.PolicyVersion == 2 && a.Reason == "payments flapping":
			applied++
		case a.Action == "policy-rollback" && a.Author == "bob" && a.PolicyVersion == 3:
			rolledBack++
		}
	}
	if applied != 1 || rolledBack != 1 || refused != 4 {
		t.Fatalf("audit lines: %d applied, %d rolled back, %d refused; want 1, 1, 4\n%+v", applied, rolledBack, refused, audits())
	}
}

func TestPolicyCommandUsage(t *testing.T) {
	clearSourceEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explode"}, "unknown command"},
		{[]string{"show"}, "--url"},
		{[]string{"apply", "f.json", "--url", "http://x", "--token", "t"}, "--reason"},
		{[]string{"apply", "f.json", "--url", "http://x", "--token", "t", "--reason", "r", "--author", ""}, "--author"},
		{[]string{"rollback", "one", "--url", "http://x", "--token", "t", "--reason", "r", "--author", "a"}, "not a version number"},
		{[]string{"dry-run", "--url", "http://x", "--token", "t"}, "want 1 argument"},
	} {
		if _, errOut, code := runCLI("policy", tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
