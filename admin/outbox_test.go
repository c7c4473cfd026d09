package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

var emails = transport.Destination{Broker: "kafka", Name: "emails"}

// deadStore returns a memory store on clock with rows of orders and emails: ids 1-3
// dead (two attempts_exhausted of orders, one circuit_deferral_exhausted of emails),
// 4 pending on emails, and emails held for 45s.
func deadStore(t *testing.T, clock *fakeclock.Clock) *memory.Store {
	t.Helper()
	ctx := context.Background()
	s := memory.New(clock)
	var entries []outbox.Entry
	for i, d := range []transport.Destination{orders, orders, emails, emails} {
		entries = append(entries, outbox.Entry{Destination: d, Message: transport.Message{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}})
	}
	if _, err := s.Enqueue(ctx, entries...); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: "t", Now: clock.Now(), Limit: 3, Lease: time.Minute}); err != nil || len(recs) != 3 {
		t.Fatalf("Claim = %d, %v", len(recs), err)
	}
	fails := []outbox.Failure{
		{ID: 1, Dead: true, Err: outbox.ReasonAttemptsExhausted + ": too large"},
		{ID: 2, Dead: true, Err: outbox.ReasonAttemptsExhausted + ": bad key"},
		{ID: 3, Dead: true, Err: outbox.ReasonDeferralExhausted},
	}
	if _, n, err := s.Fail(ctx, "t", fails); n != 3 || err != nil {
		t.Fatalf("Fail = %d, %v", n, err)
	}
	if _, err := s.Hold(ctx, outbox.Hold{Destination: emails, Now: clock.Now(), Until: clock.Now().Add(45 * time.Second), MaxDeferral: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOutboxStatsOfAStoreWithHoldsAndDeadRows(t *testing.T) {
	clock := fakeclock.New(t0)
	f := newFixture(t, admin.WithOutbox(deadStore(t, clock)), admin.WithClock(clock))
	clock.Advance(15 * time.Second)
	code, body := f.do(t, req{method: "GET", path: "/api/outbox"})
	if code != 200 {
		t.Fatalf("= %d %v", code, body)
	}
	got := fmt.Sprint(body["pending"], body["oldest_pending_ms"], body["destinations"], body["held"], body["dead"])
	want := "1 15000 [map[destination:kafka:emails oldest_pending_ms:15000 pending:1]]" +
		" [map[destination:kafka:emails remaining_ms:30000 since:2026-11-30T12:00:00Z until:2026-11-30T12:00:45Z]]" +
		" [map[reason:attempts_exhausted rows:2] map[reason:circuit_deferral_exhausted rows:1]]"
	if got != want {
		t.Fatalf("stats =\n  %s\nwant\n  %s", got, want)
	}
}

func TestDeadRowsArePaged(t *testing.T) {
	f := newFixture(t, admin.WithOutbox(deadStore(t, fakeclock.New(t0))))
	ids := func(path string) string {
		t.Helper()
		code, body := f.do(t, req{method: "GET", path: path})
		if code != 200 {
			t.Fatalf("GET %s = %d %v", path, code, body)
		}
		var out []string
		for _, r := range body["rows"].([]any) {
			row := r.(map[string]any)
			out = append(out, fmt.Sprint(row["id"], "/", row["reason"]))
		}
		return fmt.Sprint(out, " next ", body["next_after"])
	}
	for path, want := range map[string]string{
		"/api/outbox/dead":                                     "[1/attempts_exhausted 2/attempts_exhausted 3/circuit_deferral_exhausted] next <nil>",
		"/api/outbox/dead?limit=2":                             "[1/attempts_exhausted 2/attempts_exhausted] next 2",
		"/api/outbox/dead?limit=2&after=2":                     "[3/circuit_deferral_exhausted] next <nil>",
		"/api/outbox/dead?destination=kafka:emails":            "[3/circuit_deferral_exhausted] next <nil>",
		"/api/outbox/dead?reason=attempts_exhausted&limit=500": "[1/attempts_exhausted 2/attempts_exhausted] next <nil>",
		"/api/outbox/dead?destination=kafka:nope":              "[] next <nil>",
	} {
		if got := ids(path); got != want {
			t.Errorf("GET %s = %s, want %s", path, got, want)
		}
	}
}

// failingStore is an outbox whose every query fails.
type failingStore struct{ *memory.Store }

var errDown = errors.New("database down")

func (failingStore) DeadRows(context.Context, outbox.DeadFilter, outbox.Page) ([]outbox.Record, error) {
	return nil, errDown
}
func (failingStore) DeadSummaries(context.Context, outbox.DeadFilter, outbox.Page) ([]outbox.DeadSummary, error) {
	return nil, errDown
}
func (failingStore) Requeue(context.Context, outbox.DeadFilter, time.Time) (int, error) {
	return 1, errDown // one batch went through
}
func (failingStore) Holds(context.Context) ([]outbox.HoldInfo, error) { return nil, errDown }

func TestDeadRowErrors(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		opts       func(*fakeclock.Clock) []admin.Option
		code       int
		field      string
	}{
		{name: "limit 0", path: "/api/outbox/dead?limit=0", code: 400, field: "limit"},
		{name: "limit 501", path: "/api/outbox/dead?limit=501", code: 400, field: "limit"},
		{name: "limit text", path: "/api/outbox/dead?limit=ten", code: 400, field: "limit"},
		{name: "after negative", path: "/api/outbox/dead?after=-1", code: 400, field: "after"},
		{name: "after text", path: "/api/outbox/dead?after=x", code: 400, field: "after"},
		{name: "bad destination", path: "/api/outbox/dead?destination=orders", code: 400, field: "destination"},
		{name: "long reason", path: "/api/outbox/dead?reason=" + strings.Repeat("r", 201), code: 400, field: "reason"},
		{name: "no outbox", path: "/api/outbox/dead", opts: func(*fakeclock.Clock) []admin.Option { return nil }, code: 501},
		{name: "backlog only", path: "/api/outbox/dead", opts: func(*fakeclock.Clock) []admin.Option { return []admin.Option{admin.WithOutbox(backlog{})} }, code: 501},
		{name: "store fails", path: "/api/outbox/dead", opts: func(c *fakeclock.Clock) []admin.Option {
			return []admin.Option{admin.WithOutbox(failingStore{memory.New(c)})}
		}, code: 503},
		{name: "stats fail", path: "/api/outbox", opts: func(c *fakeclock.Clock) []admin.Option {
			return []admin.Option{admin.WithOutbox(failingStore{memory.New(c)})}
		}, code: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			opts := []admin.Option{admin.WithOutbox(memory.New(clock))}
			if tc.opts != nil {
				opts = tc.opts(clock)
			}
			f := newFixture(t, opts...)
			code, body := f.do(t, req{method: "GET", path: tc.path})
			if code != tc.code || body["field"] != map[bool]any{true: tc.field, false: nil}[tc.field != ""] || body["error"] == "" {
				t.Fatalf("= %d %v, want %d naming %q", code, body, tc.code, tc.field)
			}
		})
	}
}

func TestRequeue(t *testing.T) {
	s := deadStore(t, fakeclock.New(t0))
	f := newFixture(t, admin.WithOutbox(s), admin.WithMutations(token))
	code, body := f.do(t, req{method: "POST", path: "/api/outbox/requeue", body: `{"destination":"kafka:orders","reason":"attempts_exhausted"}`, header: authJSON()})
	if code != 200 || body["requeued"].(float64) != 2 {
		t.Fatalf("requeue by destination and reason = %d %v", code, body)
	}
	code, body = f.do(t, req{method: "POST", path: "/api/outbox/requeue", body: `{"ids":[3, 1]}`, header: authJSON()})
	if code != 200 || body["requeued"].(float64) != 1 { // 1 is pending again already
		t.Fatalf("requeue by id = %d %v", code, body)
	}
	for id := int64(1); id <= 3; id++ {
		if r, _ := s.Get(id); r.Status != outbox.StatusPending {
			t.Errorf("row %d is %s after the requeues", id, r.Status)
		}
	}
	if len(f.audits) != 2 || f.audits[0].Action != "requeue" || f.audits[0].Destination != "kafka:orders" ||
		f.audits[0].DeadReason != "attempts_exhausted" || f.audits[0].Requeued != 2 || f.audits[0].Status != 200 ||
		fmt.Sprint(f.audits[1].IDs) != "[3 1]" || f.audits[1].Requeued != 1 {
		t.Fatalf("audits = %+v", f.audits)
	}
}

func TestRequeueRefusals(t *testing.T) {
	const path = "/api/outbox/requeue"
	ok := `{"ids":[1]}`
	for _, tc := range []struct {
		name   string
		opts   func(*fakeclock.Clock, *memory.Store) []admin.Option
		body   string
		header map[string]string
		code   int
		field  string
	}{
		{name: "disabled", opts: func(_ *fakeclock.Clock, s *memory.Store) []admin.Option {
			return []admin.Option{admin.WithOutbox(s)}
		},
			body: ok, header: authJSON(), code: 403},
		{name: "no token", body: ok, header: map[string]string{"Content-Type": "application/json"}, code: 401, field: "Authorization"},
		{name: "wrong token", body: ok, header: map[string]string{"Authorization": "Bearer " + token + "x", "Content-Type": "application/json"}, code: 401, field: "Authorization"},
		{name: "cross-site form post", body: "ids=1", header: map[string]string{"Authorization": "Bearer " + token,
			"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site"}, code: 403},
		{name: "form content type", body: "ids=1", header: map[string]string{"Authorization": "Bearer " + token,
			"Content-Type": "application/x-www-form-urlencoded"}, code: 415, field: "Content-Type"},
		{name: "empty filter", body: `{}`, header: authJSON(), code: 400, field: "ids"},
		{name: "empty ids", body: `{"ids":[]}`, header: authJSON(), code: 400, field: "ids"},
		{name: "zero id", body: `{"ids":[0]}`, header: authJSON(), code: 400, field: "ids"},
		{name: "too many ids", body: `{"ids":[` + strings.Repeat("1,", 1000) + `1]}`, header: authJSON(), code: 400, field: "ids"},
		{name: "bad destination", body: `{"destination":"orders"}`, header: authJSON(), code: 400, field: "destination"},
		{name: "long reason", body: `{"reason":"` + strings.Repeat("r", 201) + `"}`, header: authJSON(), code: 400, field: "reason"},
		{name: "unknown field", body: `{"ids":[1],"all":true}`, header: authJSON(), code: 400, field: "body"},
		{name: "no body", header: authJSON(), code: 400, field: "body"},
		{name: "two objects", body: ok + ok, header: authJSON(), code: 400, field: "body"},
		{name: "huge body", body: `{"reason":"` + strings.Repeat("x", 40<<10) + `"}`, header: authJSON(), code: 413, field: "body"},
		{name: "no dead letters", opts: func(*fakeclock.Clock, *memory.Store) []admin.Option {
			return []admin.Option{admin.WithOutbox(backlog{}), admin.WithMutations(token)}
		}, body: ok, header: authJSON(), code: 501},
		{name: "store fails", opts: func(c *fakeclock.Clock, _ *memory.Store) []admin.Option {
			return []admin.Option{admin.WithOutbox(failingStore{memory.New(c)}), admin.WithMutations(token)}
		}, body: ok, header: authJSON(), code: 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			store := deadStore(t, clock)
			opts := []admin.Option{admin.WithOutbox(store), admin.WithMutations(token)}
			if tc.opts != nil {
				opts = tc.opts(clock, store)
			}
			f := newFixture(t, opts...)
			code, body := f.do(t, req{method: "POST", path: path, body: tc.body, header: tc.header})
			wantRefusal(t, code, body, tc.code, tc.field)
			if r, _ := store.Get(1); r.Status != outbox.StatusDead {
				t.Fatalf("a refused request requeued row 1: %+v", r)
			}
			if len(f.audits) != 1 || f.audits[0].Action != "requeue" || f.audits[0].Status != tc.code || f.audits[0].Err == "" {
				t.Fatalf("audits = %+v", f.audits)
			}
		})
	}
}

// FuzzRequeueRequest throws arbitrary bodies at the requeue route: the handler must
// answer with a status and a JSON error, never panic, and requeue only on a 200.
func FuzzRequeueRequest(f *testing.F) {
	f.Add(`{"ids":[1,2]}`, "application/json")
	f.Add(`{"destination":"kafka:orders","reason":"attempts_exhausted"}`, "application/json; charset=utf-8")
	f.Add(`{"ids":[-1]}`, "application/json")
	f.Add(`{}`, "application/json")
	f.Add(`[`, "text/plain")
	f.Fuzz(func(t *testing.T, body, ctype string) {
		clock := fakeclock.New(t0)
		s := deadStore(t, clock)
		fx := newFixture(t, admin.WithOutbox(s), admin.WithMutations(token))
		code, out := fx.do(t, req{method: "POST", path: "/api/outbox/requeue", body: body,
			header: map[string]string{"Authorization": "Bearer " + token, "Content-Type": ctype}})
		if code == 200 {
			return
		}
		if out["error"] == nil {
			t.Fatalf("status %d without an error message", code)
		}
		for id := int64(1); id <= 3; id++ {
			if r, _ := s.Get(id); r.Status != outbox.StatusDead {
				t.Fatalf("status %d but row %d was requeued", code, id)
			}
		}
	})
}

// wantRefusal checks a refusal's status, the field it names (when field is set) and
// that it says why.
func wantRefusal(t *testing.T, code int, body map[string]any, wantCode int, field string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("= %d, want %d (%v)", code, wantCode, body)
	}
	if field != "" && body["field"] != field {
		t.Fatalf("names field %v, want %q (%v)", body["field"], field, body)
	}
	if body["error"] == nil || body["error"] == "" {
		t.Fatalf("no error message: %v", body)
	}
}

// FuzzDeadQuery throws arbitrary query strings at the dead-row listing: the answer is
// a page or a 400 naming the parameter, never a panic or another status.
func FuzzDeadQuery(f *testing.F) {
	f.Add("destination=kafka:orders&reason=attempts_exhausted&after=1&limit=2")
	f.Add("limit=500")
	f.Add("limit=-1&after=9223372036854775808")
	f.Add("destination=%zz")
	f.Fuzz(func(t *testing.T, query string) {
		fx := newFixture(t, admin.WithOutbox(deadStore(t, fakeclock.New(t0))))
		hr := localRequest("GET", "/api/outbox/dead", nil)
		hr.URL.RawQuery = query
		w := httptest.NewRecorder()
		fx.h.ServeHTTP(w, hr)
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("status %d, body not JSON: %v", w.Code, err)
		}
		switch w.Code {
		case 200:
			if _, ok := body["rows"].([]any); !ok {
				t.Fatalf("a page without rows: %v", body)
			}
		case 400:
			if body["field"] == nil || body["field"] == "" {
				t.Fatalf("a 400 naming no field: %v", body)
			}
		default:
			t.Fatalf("status %d: %v", w.Code, body)
		}
	})
}
