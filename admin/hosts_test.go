package admin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/brokerguard/brokerguard/admin"
)

// localRequest is httptest.NewRequest for the loopback host the handler answers by
// default (httptest's own default, example.com, is refused).
func localRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.Host = "localhost:8080"
	return r
}

// TestHostAllowList: a page that rebinds its own name to the admin port makes the
// browser send that name as Host; every route refuses it, the read routes too.
func TestHostAllowList(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/", "/api/circuits", "/api/circuits/kafka:orders", "/api/transitions", "/api/outbox", "/api/outbox/dead"} {
		code, body := f.do(t, req{method: "GET", path: path, header: map[string]string{"Host": "rebind.attacker.example:8080"}})
		if code != http.StatusMisdirectedRequest || body["field"] != "Host" {
			t.Errorf("GET %s with a foreign Host: %d %v; want 421 naming Host", path, code, body)
		}
	}
	for _, host := range []string{"localhost", "LOCALHOST:80", "127.0.0.1:9", "[::1]:8080", "10.1.2.3", "app.localhost"} {
		if code, body := f.do(t, req{method: "GET", path: "/api/circuits", header: map[string]string{"Host": host}}); code != 200 {
			t.Errorf("GET /api/circuits with Host %s: %d %v", host, code, body)
		}
	}

	g := newFixture(t, admin.WithAllowedHosts("admin.internal", "*.svc.cluster.local"))
	for host, want := range map[string]int{
		"admin.internal:8080":              200,
		"brokerguard.ns.svc.cluster.local": 200,
		"svc.cluster.local.attacker.test":  http.StatusMisdirectedRequest,
		"admin.internal.attacker.test":     http.StatusMisdirectedRequest,
	} {
		if code, _ := g.do(t, req{method: "GET", path: "/api/circuits", header: map[string]string{"Host": host}}); code != want {
			t.Errorf("WithAllowedHosts: Host %s answered %d, want %d", host, code, want)
		}
	}
	if _, err := admin.New(f.reg, admin.WithAllowedHosts("http://x:80")); err == nil {
		t.Error("WithAllowedHosts accepted a URL")
	}
}
