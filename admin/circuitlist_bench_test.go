package admin_test

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// BenchmarkCircuitList is the dashboard's once-a-second poll of a registry at its
// default cap of 10,000 circuits, 100 of them open: the whole list (what the
// dashboard asked for before it paged), the page the dashboard asks for now, and that
// page revalidated with its ETag while nothing changed (304, no body). Compare ns/op
// and resp-bytes/op across the three.
func BenchmarkCircuitList(b *testing.B) {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}})
	if err != nil {
		b.Fatal(err)
	}
	for i := range registry.DefaultMaxDestinations {
		c, err := reg.Circuit(transport.Destination{Broker: "kafka", Name: fmt.Sprintf("topic-%05d", i)})
		if err != nil {
			b.Fatal(err)
		}
		if i%100 == 0 {
			p, _ := c.Acquire(b.Context())
			p.Complete(breaker.Failure)
		}
	}
	h, err := admin.New(reg)
	if err != nil {
		b.Fatal(err)
	}
	get := func(b *testing.B, path, etag string) (int, string, int) {
		r := localRequest("GET", path, nil)
		if etag != "" {
			r.Header.Set("If-None-Match", etag)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Header().Get("ETag"), w.Body.Len()
	}
	for _, bc := range []struct {
		name, path string
		revalidate bool
	}{
		{"all", "/api/circuits", false},
		{"dashboard-page", "/api/circuits?limit=200", false},
		{"dashboard-page-not-modified", "/api/circuits?limit=200", true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			etag := ""
			if bc.revalidate {
				_, etag, _ = get(b, bc.path, "")
			}
			var size int
			b.ReportAllocs()
			for b.Loop() {
				code, _, n := get(b, bc.path, etag)
				if code != 200 && code != 304 {
					b.Fatalf("%s: %d", bc.path, code)
				}
				size = n
			}
			b.ReportMetric(float64(size), "resp-bytes/op")
		})
	}
}
