package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

const token = "0123456789abcdef-secret"

var (
	t0     = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	orders = transport.Destination{Broker: "kafka", Name: "orders"}
)

type fixture struct {
	clock  *fakeclock.Clock
	reg    *registry.Registry
	h      *admin.Handler
	mu     sync.Mutex
	audits []admin.AuditEvent
}

func newFixture(t *testing.T, opts ...admin.Option) *fixture {
	t.Helper()
	f := &fixture{clock: fakeclock.New(t0)}
	j := admin.NewJournal(16)
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second}},
		registry.WithClock(f.clock), registry.WithObserver(j.Record),
		registry.WithBreakerOptions(breaker.WithClock(f.clock)))
	if err != nil {
		t.Fatal(err)
	}
	f.reg = reg
	if _, err := reg.Circuit(orders); err != nil {
		t.Fatal(err)
	}
	opts = append([]admin.Option{admin.WithClock(f.clock), admin.WithJournal(j),
		admin.WithAudit(func(_ context.Context, e admin.AuditEvent) {
			f.mu.Lock()
			f.audits = append(f.audits, e)
			f.mu.Unlock()
		})}, opts...)
	h, err := admin.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	return f
}

// fail records n failures on d's circuit.
func (f *fixture) fail(t *testing.T, d transport.Destination, n int) {
	t.Helper()
	c, err := f.reg.Circuit(d)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		p, err := c.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p.Complete(breaker.Failure)
	}
}

type req struct {
	method, path, body string
	header             map[string]string
}

func (f *fixture) do(t *testing.T, r req) (int, map[string]any) {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := localRequest(r.method, r.path, body)
	for k, v := range r.header {
		if k == "Host" {
			hr.Host = v
		}
		hr.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, hr)
	var out map[string]any
	if ct := w.Header().Get("Content-Type"); ct == "application/json" {
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v\n%s", r.method, r.path, err, w.Body)
		}
	}
	return w.Code, out
}

func authJSON() map[string]string {
	return map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}
}

func TestReadRoutes(t *testing.T) {
	f := newFixture(t)
	f.fail(t, orders, 2) // opens
	code, body := f.do(t, req{method: "GET", path: "/api/circuits"})
	if code != 200 {
		t.Fatalf("list: %d", code)
	}
	cs := body["circuits"].([]any)
	if len(cs) != 1 {
		t.Fatalf("circuits = %v", cs)
	}
	c := cs[0].(map[string]any)
	if c["destination"] != "kafka:orders" || c["state"] != "open" || c["failures"].(float64) != 2 ||
		c["remaining_ms"].(float64) != 30000 || body["mutations"] != false {
		t.Fatalf("circuit view = %v (mutations %v)", c, body["mutations"])
	}

	f.clock.Advance(10 * time.Second)
	code, c = f.do(t, req{method: "GET", path: "/api/circuits/kafka:orders"})
	if code != 200 || c["remaining_ms"].(float64) != 20000 {
		t.Fatalf("one circuit: %d %v", code, c)
	}

	code, body = f.do(t, req{method: "GET", path: "/api/transitions"})
	tr := body["transitions"].([]any)
	if code != 200 || len(tr) != 1 || tr[0].(map[string]any)["to"] != "open" {
		t.Fatalf("transitions: %d %v", code, body)
	}

	if code, _ = f.do(t, req{method: "GET", path: "/"}); code != 200 {
		t.Fatalf("dashboard: %d", code)
	}
}

func TestReadErrors(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		path  string
		code  int
		field string
	}{
		{"/api/circuits/kafka:nope", 404, "destination"},
		{"/api/circuits/orders", 400, "destination"}, // no broker part
		{"/api/transitions?limit=0", 400, "limit"},
		{"/api/transitions?limit=x", 400, "limit"},
		{"/api/nothing", 404, ""},
	} {
		code, body := f.do(t, req{method: "GET", path: tc.path})
		if code != tc.code {
			t.Errorf("GET %s = %d, want %d (%v)", tc.path, code, tc.code, body)
		}
		if tc.field != "" && body["field"] != tc.field {
			t.Errorf("GET %s names field %v, want %q", tc.path, body["field"], tc.field)
		}
	}
	if _, ok := f.reg.Lookup(transport.Destination{Broker: "kafka", Name: "nope"}); ok {
		t.Fatal("a GET of an unknown destination created its circuit")
	}
}

func TestMutations(t *testing.T) {
	f := newFixture(t, admin.WithMutations(token))
	code, c := f.do(t, req{method: "POST", path: "/api/circuits/kafka:orders/force-open",
		body: `{"for":"10m","reason":"broker maintenance"}`, header: authJSON()})
	if code != 200 || c["state"] != "open" || c["override"] != "forced-open" || c["remaining_ms"].(float64) != 600000 {
		t.Fatalf("force-open: %d %v", code, c)
	}
	circ, _ := f.reg.Lookup(orders)
	if _, err := circ.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after force-open Acquire = %v", err)
	}

	until := t0.Add(time.Hour).Format(time.RFC3339)
	code, c = f.do(t, req{method: "POST", path: "/api/circuits/kafka:orders/force-close",
		body: `{"until":"` + until + `"}`, header: authJSON()})
	if code != 200 || c["override"] != "forced-closed" {
		t.Fatalf("force-close: %d %v", code, c)
	}
	code, c = f.do(t, req{method: "POST", path: "/api/circuits/kafka:orders/clear",
		header: map[string]string{"Authorization": "Bearer " + token}})
	if code != 200 || c["override"] != "none" {
		t.Fatalf("clear: %d %v", code, c)
	}
	if len(f.audits) != 3 || f.audits[0].Action != "force-open" || f.audits[0].Reason != "broker maintenance" ||
		!f.audits[0].Until.Equal(t0.Add(10*time.Minute)) || f.audits[2].Status != 200 {
		t.Fatalf("audits = %+v", f.audits)
	}
}

func TestMutationRefusals(t *testing.T) {
	past := t0.Add(-time.Minute).Format(time.RFC3339)
	for _, tc := range []struct {
		name   string
		opts   []admin.Option
		path   string
		body   string
		header map[string]string
		code   int
		field  string
	}{
		{name: "disabled", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"1m"}`, header: authJSON(), code: 403},
		{name: "no token", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"1m"}`,
			header: map[string]string{"Content-Type": "application/json"}, code: 401, field: "Authorization"},
		{name: "wrong token", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"1m"}`,
			header: map[string]string{"Authorization": "Bearer " + token + "x", "Content-Type": "application/json"}, code: 401, field: "Authorization"},
		{name: "cross-site form post", path: "/api/circuits/kafka:orders/force-open", body: `for=1m`,
			header: map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/x-www-form-urlencoded",
				"Sec-Fetch-Site": "cross-site"}, code: 403},
		{name: "foreign origin", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"1m"}`,
			header: map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json",
				"Origin": "https://evil.example"}, code: 403},
		{name: "form content type", path: "/api/circuits/kafka:orders/force-open", body: `for=1m`,
			header: map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/x-www-form-urlencoded"}, code: 415, field: "Content-Type"},
		{name: "unknown destination", path: "/api/circuits/kafka:nope/force-open", body: `{"for":"1m"}`, header: authJSON(), code: 404, field: "destination"},
		{name: "bad destination", path: "/api/circuits/nobroker/force-open", body: `{"for":"1m"}`, header: authJSON(), code: 400, field: "destination"},
		{name: "unknown action", path: "/api/circuits/kafka:orders/explode", body: `{"for":"1m"}`, header: authJSON(), code: 404, field: "action"},
		{name: "malformed duration", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"ten minutes"}`, header: authJSON(), code: 400, field: "for"},
		{name: "negative duration", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"-1m"}`, header: authJSON(), code: 400, field: "for"},
		{name: "too long", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"48h"}`, header: authJSON(), code: 400, field: "for"},
		{name: "time in the past", path: "/api/circuits/kafka:orders/force-close", body: `{"until":"` + past + `"}`, header: authJSON(), code: 400, field: "until"},
		{name: "malformed time", path: "/api/circuits/kafka:orders/force-close", body: `{"until":"tomorrow"}`, header: authJSON(), code: 400, field: "until"},
		{name: "both", path: "/api/circuits/kafka:orders/force-close", body: `{"for":"1m","until":"` + past + `"}`, header: authJSON(), code: 400, field: "for"},
		{name: "neither", path: "/api/circuits/kafka:orders/force-close", body: `{}`, header: authJSON(), code: 400, field: "for"},
		{name: "no body", path: "/api/circuits/kafka:orders/force-close", header: authJSON(), code: 400, field: "body"},
		{name: "unknown field", path: "/api/circuits/kafka:orders/force-close", body: `{"for":"1m","forever":true}`, header: authJSON(), code: 400, field: "body"},
		{name: "huge body", path: "/api/circuits/kafka:orders/force-close", body: `{"reason":"` + strings.Repeat("x", 5000) + `"}`, header: authJSON(), code: 413, field: "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if tc.name != "disabled" {
				opts = append(opts, admin.WithMutations(token))
			}
			f := newFixture(t, opts...)
			code, body := f.do(t, req{method: "POST", path: tc.path, body: tc.body, header: tc.header})
			wantRefusal(t, code, body, tc.code, tc.field)
			if s := f.reg.Snapshots()[orders]; s.Override != breaker.NoOverride {
				t.Fatalf("a refused request changed the circuit: %+v", s)
			}
			if len(f.audits) != 1 || f.audits[0].Status != tc.code || f.audits[0].Err == "" {
				t.Fatalf("audits = %+v", f.audits)
			}
		})
	}
}

// sharedCircuit stands in for a shared backend's circuit, whose overrides can fail.
type sharedCircuit struct {
	breaker.Circuit
	err error
}

func (s *sharedCircuit) ForceOpen(context.Context, time.Time) error  { return s.err }
func (s *sharedCircuit) ForceClose(context.Context, time.Time) error { return s.err }
func (s *sharedCircuit) ClearOverride(context.Context) error         { return s.err }

func TestSharedOverrideFailureIs502(t *testing.T) {
	clock := fakeclock.New(t0)
	local, err := breaker.New("x", breaker.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{Disabled: true, Scope: breaker.SharedDependency}},
		registry.WithCircuitFactory(breaker.SharedDependency, func(transport.Destination, breaker.Policy) (breaker.Circuit, error) {
			return &sharedCircuit{Circuit: local, err: errors.New("table unreachable")}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Circuit(orders); err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(reg, admin.WithMutations(token), admin.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h}
	code, body := f.do(t, req{method: "POST", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"1m"}`, header: authJSON()})
	if code != http.StatusBadGateway || !strings.Contains(body["error"].(string), "table unreachable") {
		t.Fatalf("= %d %v", code, body)
	}
}

type backlog struct{ err error }

func (b backlog) Backlog(context.Context) (int64, time.Duration, error) {
	return 42, 3 * time.Second, b.err
}

func TestOutboxStats(t *testing.T) {
	f := newFixture(t)
	if code, body := f.do(t, req{method: "GET", path: "/api/outbox"}); code != 200 || body["enabled"] != false {
		t.Fatalf("without outbox: %d %v", code, body)
	}
	f = newFixture(t, admin.WithOutbox(backlog{}))
	if code, body := f.do(t, req{method: "GET", path: "/api/outbox"}); code != 200 || body["pending"].(float64) != 42 || body["oldest_pending_ms"].(float64) != 3000 {
		t.Fatalf("with outbox: %d %v", code, body)
	}
	// A failing backlog query is an error, not a zero that looks healthy.
	f = newFixture(t, admin.WithOutbox(backlog{err: errors.New("database down")}))
	if code, body := f.do(t, req{method: "GET", path: "/api/outbox"}); code != 503 || body["pending"].(float64) != 0 || body["error"] != "database down" {
		t.Fatalf("failing outbox: %d %v", code, body)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	reg, err := registry.New(registry.Policy{Circuit: breaker.DisabledPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]admin.Option{
		"short token": admin.WithMutations("short"),
		"nil audit":   admin.WithAudit(nil),
		"nil journal": admin.WithJournal(nil),
		"nil outbox":  admin.WithOutbox(nil),
		"nil clock":   admin.WithClock(nil),
		"zero hold":   admin.WithMaxHold(0),
	} {
		if _, err := admin.New(reg, opt); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := admin.New(nil); err == nil {
		t.Error("New(nil) accepted")
	}
}

func TestJournalKeepsTheNewest(t *testing.T) {
	j := admin.NewJournal(3)
	for i := range 5 {
		j.Record(orders, breaker.Transition{Generation: uint64(i)})
	}
	got := j.Recent(10)
	if len(got) != 3 || got[0].Generation != 4 || got[2].Generation != 2 {
		t.Fatalf("Recent = %+v", got)
	}
	if got := j.Recent(1); len(got) != 1 || got[0].Generation != 4 {
		t.Fatalf("Recent(1) = %+v", got)
	}
}

// FuzzMutationRequest throws arbitrary paths, bodies and headers at the mutation route:
// the handler must answer with a status and a JSON body, never panic, and change the
// circuit only on a 200.
func FuzzMutationRequest(f *testing.F) {
	f.Add("kafka:orders", "force-open", `{"for":"10m"}`, "application/json")
	f.Add("kafka:orders", "force-close", `{"until":"2026-11-30T13:00:00Z"}`, "application/json")
	f.Add("kafka:orders", "clear", ``, "")
	f.Add("sqs:%2F%2F", "force-open", `{"for":"1e9h"}`, "application/json; charset=utf-8")
	f.Add("x", "y", `[`, "text/plain")
	f.Fuzz(func(t *testing.T, dest, action, body, ctype string) {
		fx := newFixture(t, admin.WithMutations(token))
		hr := localRequest("POST", "/api/circuits/x/y", strings.NewReader(body))
		hr.URL.Path = "/api/circuits/" + dest + "/" + action
		hr.URL.RawPath = ""
		hr.Header.Set("Authorization", "Bearer "+token)
		hr.Header.Set("Content-Type", ctype)
		w := httptest.NewRecorder()
		fx.h.ServeHTTP(w, hr)
		if w.Code == 200 {
			return
		}
		if s := fx.reg.Snapshots()[orders]; s.Override != breaker.NoOverride {
			t.Fatalf("status %d but the circuit changed: %+v", w.Code, s)
		}
	})
}
