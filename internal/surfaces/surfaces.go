// Package surfaces gives integration tests what on-call reads of one registry: the
// admin API's circuit JSON, the transitions the registry's observers were told and
// the metrics telemetry exports, so that a test can check that each names the
// mechanism that refused a call.
package surfaces

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// Surfaces is one registry with its admin handler, an observer and telemetry.
type Surfaces struct {
	t *testing.T
	// Registry has the telemetry recorder's options, the observer and opts.
	Registry *registry.Registry
	h        *admin.Handler
	reader   *sdkmetric.ManualReader

	mu          sync.Mutex
	transitions []string // "identity from->to reason"
}

// New builds a registry with policy p and opts (a clock among them, when the test
// has one), and the admin handler and metrics over it, shut down when the test ends.
func New(t *testing.T, p registry.Policy, opts ...registry.Option) *Surfaces {
	t.Helper()
	s := &Surfaces{t: t, reader: sdkmetric.NewManualReader()}
	rec := telemetry.NewRecorder()
	observe := registry.WithObserver(func(_ transport.Destination, tr breaker.Transition) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.transitions = append(s.transitions, tr.Identity+" "+tr.From.String()+"->"+tr.To.String()+" "+tr.Reason)
	})
	var err error
	if s.Registry, err = registry.New(p, append(append(rec.RegistryOptions(), observe), opts...)...); err != nil {
		t.Fatal(err)
	}
	if s.h, err = admin.New(s.Registry); err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := telemetry.New(s.Registry, telemetry.WithMeterProvider(mp), telemetry.WithRecorder(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return s
}

// Circuit is the admin API's answer for the circuit named id ("kafka:orders"): the
// HTTP status and, on 200, the circuit's JSON view.
func (s *Surfaces) Circuit(id string) (int, admin.Circuit) {
	rec, req := httptest.NewRecorder(), httptest.NewRequest("GET", "/api/circuits/"+id, nil)
	req.Host = "127.0.0.1"
	s.h.ServeHTTP(rec, req)
	var c admin.Circuit
	if rec.Code == 200 {
		if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
			s.t.Fatalf("GET /api/circuits/%s: %v", id, err)
		}
	}
	return rec.Code, c
}

// Observed lists the transitions the observers were told, in order, each as
// "identity from->to reason".
func (s *Surfaces) Observed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.transitions)
}

// Metric is the value of the integer metric name for the destination named dest
// whose other attributes include each of want ("key=value"); false when no series
// matches.
func (s *Surfaces) Metric(name, dest string, want ...string) (int64, bool) {
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		s.t.Fatal(err)
	}
	match := func(set attribute.Set) bool {
		if v, _ := set.Value("messaging.destination.name"); v.AsString() != dest {
			return false
		}
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			if got, ok := set.Value(attribute.Key(k)); !ok || got.String() != v {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			case metricdata.Sum[int64]:
				points = d.DataPoints
			}
			for _, p := range points {
				if match(p.Attributes) {
					return p.Value, true
				}
			}
		}
	}
	return 0, false
}
