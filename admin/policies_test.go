package admin_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
)

// tighter is a policy set whose default opens after one failure, for 30s.
const tighter = `{"Default": {"Circuit": {"FailureThreshold": 1, "BreakDuration": "30s"}}}`

func TestPolicyRoutes(t *testing.T) {
	f := newFixture(t, admin.WithMutations(token))
	f.fail(t, orders, 1)

	code, body := f.do(t, req{method: "GET", path: "/api/policies"})
	if code != 200 || body["active"].(map[string]any)["version"] != 1.0 {
		t.Fatalf("GET /api/policies = %d %v", code, body)
	}

	code, body = f.do(t, req{method: "POST", path: "/api/policies/dry-run", body: `{"set": ` + tighter + `}`, header: authJSON()})
	if code != 200 {
		t.Fatalf("dry-run = %d %v", code, body)
	}
	rows := body["destinations"].([]any)
	row := rows[0].(map[string]any)
	if len(rows) != 1 || row["destination"] != "kafka:orders" || row["state"] != "closed" || row["opens_on_next_failure"] != true {
		t.Fatalf("dry-run rows %v", rows)
	}
	if f.reg.Policies().Version != 1 {
		t.Fatal("the dry run changed the version")
	}

	code, body = f.do(t, req{method: "POST", path: "/api/policies/apply", header: authJSON(),
		body: `{"set": ` + tighter + `, "author": "ann", "reason": "orders flapping", "expires_in": "1h"}`})
	if code != 200 || body["version"].(map[string]any)["version"] != 2.0 {
		t.Fatalf("apply = %d %v", code, body)
	}
	if v := f.reg.Policies(); v.Version != 2 || !v.Expires.Equal(t0.Add(time.Hour)) {
		t.Fatalf("in force: %+v", v)
	}

	code, body = f.do(t, req{method: "POST", path: "/api/policies/rollback", header: authJSON(),
		body: `{"version": 1, "author": "bob", "reason": "too tight"}`})
	if code != 200 || body["version"].(map[string]any)["version"] != 3.0 {
		t.Fatalf("rollback = %d %v", code, body)
	}
	if got := f.reg.Policy(orders).Circuit.FailureThreshold; got != 2 {
		t.Fatalf("after the rollback threshold %d, want 2", got)
	}

	code, body = f.do(t, req{method: "GET", path: "/api/policies"})
	if h := body["history"].([]any); code != 200 || len(h) != 3 || h[0].(map[string]any)["author"] != "bob" {
		t.Fatalf("history = %d %v", code, body)
	}
	want := []struct {
		action, author string
		version        uint64
	}{{"policy-dry-run", "", 0}, {"policy-apply", "ann", 2}, {"policy-rollback", "bob", 3}}
	if len(f.audits) != len(want) {
		t.Fatalf("audits %+v", f.audits)
	}
	for i, w := range want {
		a := f.audits[i]
		if a.Action != w.action || a.Author != w.author || a.PolicyVersion != w.version || a.Status != 200 || a.Err != "" {
			t.Fatalf("audit %d = %+v, want %+v", i, a, w)
		}
	}
}

func TestPolicyRefusals(t *testing.T) {
	apply := `{"set": ` + tighter + `, "author": "ann", "reason": "r"}`
	type tc struct {
		name, path, body string
		header           map[string]string
		code             int
		field            string
		disabled         bool
	}
	cases := []tc{
		{name: "unknown action", path: "/api/policies/replace", body: apply, header: authJSON(), code: 404, field: "action"},
		{name: "invalid set", path: "/api/policies/apply", header: authJSON(), code: 400, field: "set",
			body: `{"set": {"Default": {"Circuit": {"FailureThreshold": 1}}}, "author": "a", "reason": "r"}`},
		{name: "unknown policy field", path: "/api/policies/dry-run", header: authJSON(), code: 400, field: "body",
			body: `{"set": {"Default": {"Circuit": {"FailureTreshold": 1}}}}`},
		{name: "no reason", path: "/api/policies/apply", header: authJSON(), code: 400, field: "reason",
			body: `{"set": ` + tighter + `, "author": "ann"}`},
		{name: "bad expiry", path: "/api/policies/apply", header: authJSON(), code: 400, field: "expires_in",
			body: `{"set": ` + tighter + `, "author": "ann", "reason": "r", "expires_in": "soon"}`},
		{name: "rollback to an unknown version", path: "/api/policies/rollback", header: authJSON(), code: 404, field: "version",
			body: `{"version": 9, "author": "a", "reason": "r"}`},
		{name: "huge body", path: "/api/policies/apply", header: authJSON(), code: 413, field: "body",
			body: `{"reason":"` + strings.Repeat("x", 1<<20) + `"}`},
	}
	// The token rules, for each of the three changes.
	for _, p := range []string{"dry-run", "apply", "rollback"} {
		path := "/api/policies/" + p
		cases = append(cases,
			tc{name: p + " disabled", path: path, body: apply, header: authJSON(), code: 403, disabled: true},
			tc{name: p + " no token", path: path, body: apply, header: map[string]string{"Content-Type": "application/json"}, code: 401, field: "Authorization"},
			tc{name: p + " wrong token", path: path, body: apply,
				header: map[string]string{"Authorization": "Bearer " + token + "x", "Content-Type": "application/json"}, code: 401, field: "Authorization"},
			tc{name: p + " foreign origin", path: path, body: apply,
				header: map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json", "Origin": "https://evil.example"}, code: 403},
			tc{name: p + " form", path: path, body: "set=x",
				header: map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/x-www-form-urlencoded"}, code: 415, field: "Content-Type"},
			tc{name: p + " rebound host", path: path, body: apply,
				header: map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json", "Host": "rebind.attacker.example:8080"}, code: 421, field: "Host"},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var opts []admin.Option
			if !c.disabled {
				opts = append(opts, admin.WithMutations(token))
			}
			f := newFixture(t, opts...)
			code, body := f.do(t, req{method: "POST", path: c.path, body: c.body, header: c.header})
			wantRefusal(t, code, body, c.code, c.field)
			if v := f.reg.Policies().Version; v != 1 {
				t.Fatalf("a refused request made version %d", v)
			}
			if c.code == http.StatusMisdirectedRequest {
				return // refused before any route: not a mutation request of this handler
			}
			if len(f.audits) != 1 || f.audits[0].Status != c.code || f.audits[0].Err == "" || !strings.HasPrefix(f.audits[0].Action, "policy-") {
				t.Fatalf("audits = %+v", f.audits)
			}
		})
	}
}
