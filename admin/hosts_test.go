package admin_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
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

// FuzzHostHeader throws arbitrary Host headers at a read route: the handler answers
// 200 or a 421 naming Host, and it answers only hosts that are IP addresses or contain
// a name it was given (localhost, admin.internal, this machine's name).
func FuzzHostHeader(f *testing.F) {
	for _, s := range []string{"localhost:8080", "127.0.0.1", "[::1]:1", "evil.example", "app.localhost", "", ":", "[",
		"a.localhost.evil", "LOCALHOST.", "[fe80::1%25eth0]:80", "admin.internal:1", "x.admin.internal"} {
		f.Add(s)
	}
	machine, _ := os.Hostname()
	f.Fuzz(func(t *testing.T, host string) {
		fx := newFixture(t, admin.WithAllowedHosts("admin.internal"))
		r := localRequest("GET", "/api/circuits", nil)
		r.Host = host
		w := httptest.NewRecorder()
		fx.h.ServeHTTP(w, r)
		if w.Code != 200 && w.Code != http.StatusMisdirectedRequest {
			t.Fatalf("Host %q: status %d", host, w.Code)
		}
		if w.Code != 200 {
			return
		}
		name := host
		if h, _, err := net.SplitHostPort(host); err == nil {
			name = h
		}
		name = strings.ToLower(strings.Trim(name, "[]"))
		known := net.ParseIP(name) != nil || strings.Contains(name, "localhost") || strings.Contains(name, "admin.internal") ||
			machine != "" && strings.Contains(name, strings.ToLower(strings.SplitN(machine, ".", 2)[0]))
		if !known {
			t.Fatalf("Host %q (name %q) was answered", host, name)
		}
	})
}
