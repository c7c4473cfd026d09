package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/transport"
)

// list GETs path from f's handler and returns the status, the ETag and the list.
func (f *fixture) list(t *testing.T, path string, header map[string]string) (int, string, admin.Circuits) {
	t.Helper()
	r := localRequest("GET", path, nil)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	var out admin.Circuits
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	} else if w.Code == http.StatusNotModified && w.Body.Len() != 0 {
		t.Fatalf("GET %s: 304 with a body of %d bytes", path, w.Body.Len())
	}
	return w.Code, w.Header().Get("ETag"), out
}

// TestCircuitPages: limit and after page through every circuit in destination
// order, each page saying the total and where the next begins; unhealthy=true keeps
// the unhealthy circuits only.
func TestCircuitPages(t *testing.T) {
	f := newFixture(t)
	for i := range 7 { // with the fixture's kafka:orders, 8 circuits
		if _, err := f.reg.Circuit(transport.Destination{Broker: "kafka", Name: fmt.Sprintf("t%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	f.fail(t, transport.Destination{Broker: "kafka", Name: "t3"}, 2) // opens
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		code, _, page := f.list(t, "/api/circuits?limit=3&after="+after, nil)
		if code != 200 || page.Total != 8 || page.Unhealthy != 1 || len(page.Circuits) > 3 {
			t.Fatalf("page %d: %d, total %d, unhealthy %d, %d circuits", pages, code, page.Total, page.Unhealthy, len(page.Circuits))
		}
		for _, c := range page.Circuits {
			got = append(got, c.Destination)
		}
		if page.NextAfter == "" {
			break
		}
		if page.NextAfter != got[len(got)-1] || pages > 3 {
			t.Fatalf("page %d: next_after %q after %q", pages, page.NextAfter, got[len(got)-1])
		}
		after = page.NextAfter
	}
	if strings.Join(got, " ") != "kafka:orders kafka:t0 kafka:t1 kafka:t2 kafka:t3 kafka:t4 kafka:t5 kafka:t6" {
		t.Errorf("paged: %v", got)
	}
	_, _, unhealthy := f.list(t, "/api/circuits?unhealthy=true", nil)
	if unhealthy.Total != 1 || len(unhealthy.Circuits) != 1 || unhealthy.Circuits[0].Destination != "kafka:t3" {
		t.Errorf("unhealthy=true: %+v", unhealthy)
	}
	for _, q := range []string{"limit=0", "limit=10001", "limit=x", "unhealthy=maybe"} {
		code, body := f.do(t, req{method: "GET", path: "/api/circuits?" + q})
		field, _, _ := strings.Cut(q, "=")
		if code != 400 || body["field"] != field {
			t.Errorf("%s: %d %v, want 400 naming %s", q, code, body, field)
		}
	}
}

// TestCircuitListConditional: the list carries a weak ETag; asked again with it in
// If-None-Match, the handler answers 304 with no body while nothing but the clock
// moved (countdowns included), and a new list with a new ETag once a circuit changes.
func TestCircuitListConditional(t *testing.T) {
	f := newFixture(t)
	f.fail(t, orders, 2) // open, counting down
	code, tag, first := f.list(t, "/api/circuits", nil)
	if code != 200 || !strings.HasPrefix(tag, `W/"`) || first.Circuits[0].RemainingMS != 30000 {
		t.Fatalf("first: %d %q %+v", code, tag, first)
	}
	f.clock.Advance(10 * time.Second)
	if code, again, _ := f.list(t, "/api/circuits", map[string]string{"If-None-Match": tag}); code != 304 || again != tag {
		t.Fatalf("unchanged but for the clock: %d %q, want 304 with %q", code, again, tag)
	}
	if code, _, _ := f.list(t, "/api/circuits", map[string]string{"If-None-Match": `"other", ` + strings.TrimPrefix(tag, "W/")}); code != 304 {
		t.Errorf("a list of tags holding it (strong form): %d, want 304", code)
	}
	f.fail(t, transport.Destination{Broker: "kafka", Name: "payments"}, 1)
	code, changed, second := f.list(t, "/api/circuits", map[string]string{"If-None-Match": tag})
	if code != 200 || changed == tag || len(second.Circuits) != 2 {
		t.Fatalf("after a change: %d %q (was %q), %d circuits", code, changed, tag, len(second.Circuits))
	}
	if code, _, _ := f.list(t, "/api/circuits", map[string]string{"If-None-Match": `W/"nope"`}); code != 200 {
		t.Errorf("a stale tag: %d, want 200", code)
	}
}
