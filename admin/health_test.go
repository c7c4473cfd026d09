package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// failingPublisher fails every publish with err.
type failingPublisher struct{ err error }

func (p failingPublisher) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return p.err
}

// TestOutageShowsWhyAndSinceWhen drives an outage through a guarded publisher: the API
// shows the broker's error (redacted) and when the outage began, and twelve probe
// cycles collapse into one journal event after the opening.
func TestOutageShowsWhyAndSinceWhen(t *testing.T) {
	f := newFixture(t)
	started := t0
	brokerErr := errors.New("kafka: LEADER_NOT_AVAILABLE via sasl://svc:pa55@broker-1:9092\x1b[2J")
	pub := f.reg.Guard(failingPublisher{brokerErr}, nil)
	msg := transport.Message{Value: []byte("x")}
	f.clock.Advance(10 * time.Second)
	opened := f.clock.Now()
	for range 2 {
		_ = pub.Publish(context.Background(), orders, msg)
	}
	for range 12 { // twelve probes, each after the break, each failing
		f.clock.Advance(time.Hour)
		_ = pub.Publish(context.Background(), orders, msg)
	}
	code, c := f.do(t, req{method: "GET", path: "/api/circuits/kafka:orders"})
	if code != 200 {
		t.Fatalf("GET circuit: %d %v", code, c)
	}
	wantErr := `kafka: LEADER_NOT_AVAILABLE via sasl://[redacted]@broker-1:9092\x1b[2J`
	if c["last_error"] != wantErr || c["unhealthy_since"] != opened.Format(time.RFC3339) ||
		c["failed_probes"].(float64) != 12 {
		t.Fatalf("circuit view: last_error %q unhealthy_since %v failed_probes %v; want %q, %v, 12",
			c["last_error"], c["unhealthy_since"], c["failed_probes"], wantErr, opened.Format(time.RFC3339))
	}
	_, list := f.do(t, req{method: "GET", path: "/api/circuits"})
	if list["started"] != started.Format(time.RFC3339) {
		t.Fatalf("started %v; want the handler's creation %v", list["started"], started)
	}

	_, body := f.do(t, req{method: "GET", path: "/api/transitions"})
	tr := body["transitions"].([]any)
	if len(tr) != 2 {
		t.Fatalf("transitions: %d events, want the opening and one probing run: %v", len(tr), tr)
	}
	run, first := tr[0].(map[string]any), tr[1].(map[string]any)
	if first["reason"] != breaker.ReasonFailureThreshold || run["cycles"].(float64) != 12 ||
		run["failed_probes"].(float64) != 12 || run["to"] != "open" || run["last_at"] == nil {
		t.Fatalf("transitions: %v", tr)
	}
}

func TestOutageLine(t *testing.T) {
	since := t0
	h := admin.Health{UnhealthySince: &since, FailedProbes: 12}
	if got, want := h.Outage(t0.Add(4*time.Minute+10*time.Second), time.UTC), "unhealthy since 12:00:00 (4m10s), 12 failed probes"; got != want {
		t.Fatalf("Outage = %q, want %q", got, want)
	}
	if got := (admin.Health{}).Outage(t0, time.UTC); got != "" {
		t.Fatalf("healthy Outage = %q", got)
	}
}

// TestJournalKeepsTheOpeningThroughProbeCycles: a journal of 16 events, 200 probe
// cycles: the opening is still there.
func TestJournalKeepsTheOpeningThroughProbeCycles(t *testing.T) {
	j := admin.NewJournal(16)
	at := t0
	rec := func(from, to breaker.State, reason string) {
		at = at.Add(time.Second)
		j.Record(orders, breaker.Transition{From: from, To: to, At: at, Reason: reason})
	}
	rec(breaker.Closed, breaker.Open, breaker.ReasonFailureThreshold)
	for range 200 {
		rec(breaker.Open, breaker.HalfOpen, breaker.ReasonBreakElapsed)
		rec(breaker.HalfOpen, breaker.Open, breaker.ReasonProbeFailed)
	}
	rec(breaker.Open, breaker.HalfOpen, breaker.ReasonBreakElapsed)
	rec(breaker.HalfOpen, breaker.Closed, breaker.ReasonProbeSucceeded)
	got := j.Recent(16)
	if len(got) != 3 || got[2].Reason != breaker.ReasonFailureThreshold || got[1].Cycles != 201 ||
		got[1].FailedProbes != 200 || got[1].To != breaker.HalfOpen || got[0].Reason != breaker.ReasonProbeSucceeded {
		t.Fatalf("journal: %+v", got)
	}
}

// FuzzTransitionsQuery throws arbitrary query strings at /api/transitions: a 200 with
// at most the limit asked for, or a 400 naming limit.
func FuzzTransitionsQuery(f *testing.F) {
	for _, s := range []string{"limit=1", "limit=1000", "limit=0", "limit=1001", "limit=-1", "limit=1e3", "limit=%00", "", "limit=1&limit=2", "limit=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		fx := newFixture(t)
		fx.fail(t, orders, 2)
		r := localRequest("GET", "/api/transitions", nil)
		r.URL.RawQuery = query
		w := httptest.NewRecorder()
		fx.h.ServeHTTP(w, r)
		var body struct {
			Field       string             `json:"field"`
			Transitions []admin.Transition `json:"transitions"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("query %q: status %d, body not JSON: %s", query, w.Code, w.Body)
		}
		switch {
		case w.Code == 200 && len(body.Transitions) <= 1:
		case w.Code == 400 && body.Field == "limit":
		default:
			t.Fatalf("query %q: status %d %s", query, w.Code, w.Body)
		}
	})
}
