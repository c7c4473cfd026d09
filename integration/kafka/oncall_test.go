package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// surfaces is what on-call reads of one registry: the admin JSON, the transitions its
// observers were told and the metrics telemetry exports.
type surfaces struct {
	t      *testing.T
	reg    *registry.Registry
	h      *admin.Handler
	reader *sdkmetric.ManualReader

	mu          sync.Mutex
	transitions []string // "identity from->to reason"
}

// newSurfaces builds a registry on clock with the telemetry recorder's options and an
// observer, and the admin handler and metrics over it.
func newSurfaces(t *testing.T, clock *fakeclock.Clock, p breaker.Policy) *surfaces {
	t.Helper()
	s := &surfaces{t: t, reader: sdkmetric.NewManualReader()}
	rec := telemetry.NewRecorder()
	observe := registry.WithObserver(func(_ transport.Destination, tr breaker.Transition) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.transitions = append(s.transitions, tr.Identity+" "+tr.From.String()+"->"+tr.To.String()+" "+tr.Reason)
	})
	var err error
	if s.reg, err = registry.New(registry.Policy{Circuit: p}, append(rec.RegistryOptions(), registry.WithClock(clock), observe)...); err != nil {
		t.Fatal(err)
	}
	if s.h, err = admin.New(s.reg, admin.WithClock(clock)); err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := telemetry.New(s.reg, telemetry.WithMeterProvider(mp), telemetry.WithRecorder(rec), telemetry.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return s
}

// circuit is the admin JSON of the circuit named id, and the HTTP status.
func (s *surfaces) circuit(id string) (int, admin.Circuit) {
	rec, req := httptest.NewRecorder(), httptest.NewRequest("GET", "/api/circuits/"+id, nil)
	req.Host = "127.0.0.1"
	s.h.ServeHTTP(rec, req)
	var c admin.Circuit
	if rec.Code == 200 {
		if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
			s.t.Fatalf("GET %s: %v", id, err)
		}
	}
	return rec.Code, c
}

func (s *surfaces) observed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.transitions)
}

// metric is the value of the integer metric name for the destination named dest
// whose other attributes include want ("key=value"); false when there is none.
func (s *surfaces) metric(name, dest string, want ...string) (int64, bool) {
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
			if got, ok := set.Value(attribute.Key(k)); !ok || got.Emit() != v {
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
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						return p.Value, true
					}
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						return p.Value, true
					}
				}
			}
		}
	}
	return 0, false
}

// A topic written with one key, its broker gone: by the first refusal the topic's
// circuit is open for every surface on-call reads. The admin JSON says open with the
// broker's error and lists the key's partition as isolated, the observers were told
// the partition's isolation and the circuit's opening, the metrics count both, and
// the refusal names a circuit the admin API shows. No time passes on the registry's
// clock between the broker going and the first refusal.
func TestOneKeyTopicDownIsSeen(t *testing.T) {
	cluster := harness.KFake(t, kfake.NumBrokers(1))
	topic := harness.TopicNames("one-key")[0]
	if err := cluster.CreateTopic(topic, 3, nil); err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(t0)
	s := newSurfaces(t, clock, breaker.Policy{FailureThreshold: 3, BreakDuration: 30 * time.Second})
	w := kafka.NewWriter(cluster.ListenAddrs()...)
	w.MaxAttempts = 1
	t.Cleanup(func() { _ = w.Close() })
	pub, err := kafka.NewPublisher(w, s.reg)
	if err != nil {
		t.Fatal(err)
	}
	d := kafka.Topic(topic)
	ctx := context.Background()
	m := transport.Message{Key: []byte("customer-42"), Value: []byte("v")}
	if err := pub.Publish(ctx, d, m); err != nil {
		t.Fatalf("with the broker up: %v", err)
	}
	cluster.Close()

	var refusal error
	for i := range 20 {
		err := pub.Publish(ctx, d, m)
		if err == nil {
			t.Fatalf("publish %d with the broker gone succeeded", i)
		}
		if errors.Is(err, breaker.ErrOpen) {
			refusal = err
			break
		}
	}
	if refusal == nil {
		t.Fatal("20 publishes with the broker gone, none refused")
	}

	code, c := s.circuit(d.String())
	if code != 200 || c.State != "open" || c.LastError == "" || len(c.IsolatedPartitions) != 1 {
		t.Fatalf("admin: %d %+v; want open with the broker's error and one isolated partition", code, c)
	}
	part := c.IsolatedPartitions[0].Partition
	if c.IsolatedPartitions[0].LastError == "" {
		t.Errorf("isolated partition %+v has no last error", c.IsolatedPartitions[0])
	}
	wantSeen := []string{
		d.String() + "/" + strconv.Itoa(part) + " closed->open " + registry.ReasonPartitionIsolated,
		d.String() + " closed->open " + breaker.ReasonFailureThreshold,
	}
	if got := s.observed(); !slices.Equal(got, wantSeen) {
		t.Errorf("observed %q, want %q", got, wantSeen)
	}
	if n, _ := s.metric("brokerguard.circuit.partitions.isolations", topic); n != 1 {
		t.Errorf("partition isolations metric %d, want 1", n)
	}
	if n, _ := s.metric("brokerguard.circuit.state", topic, "brokerguard.circuit.state=open"); n != 1 {
		t.Errorf("circuit state metric open = %d, want 1", n)
	}
	oe, ok := errors.AsType[*breaker.OpenError](refusal)
	if !ok {
		t.Fatalf("refusal %v has no OpenError", refusal)
	}
	if code, _ := s.circuit(oe.Identity); code != 200 {
		t.Errorf("the refusal names %q; the admin API answers %d for it", oe.Identity, code)
	}
}
