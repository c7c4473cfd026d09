package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// promService is a service exporting its metrics the way docs/telemetry.md says: the
// OpenTelemetry Prometheus exporter, a resource naming the service, no scope labels,
// and the cardinality limit for the registry's cap.
type promService struct {
	clock *fakeclock.Clock
	reg   *registry.Registry
	m     *telemetry.Metrics
	raw   *fakePublisher
	pub   transport.Publisher
	url   string // of /metrics
}

// promConfig says how to build a promService.
type promConfig struct {
	policy  breaker.Policy
	regOpts []registry.Option
	opts    []telemetry.Option
	limit   int // the provider's cardinality limit; 0: telemetry.CardinalityLimit of the registry's default cap
}

func newPromService(t testing.TB, cfg promConfig) *promService {
	t.Helper()
	s := &promService{clock: fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), raw: &fakePublisher{}}
	rec := telemetry.NewRecorder()
	regOpts := append(append([]registry.Option{registry.WithClock(s.clock)}, rec.RegistryOptions()...), cfg.regOpts...)
	reg, err := registry.New(registry.Policy{Circuit: cfg.policy}, regOpts...)
	if err != nil {
		t.Fatal(err)
	}
	s.reg = reg
	promReg := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(promReg), prometheus.WithoutScopeInfo(),
		prometheus.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		t.Fatal(err)
	}
	limit := cfg.limit
	if limit == 0 {
		limit = telemetry.CardinalityLimit(registry.DefaultMaxDestinations)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithCardinalityLimit(limit),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", "brokerguard-test"))))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	opts := append([]telemetry.Option{telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp), telemetry.WithClock(s.clock)}, cfg.opts...)
	m, err := telemetry.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	s.m = m
	s.pub = reg.Guard(s.raw, nil)
	srv := httptest.NewUnstartedServer(promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	srv.Start()
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/metrics"
	return s
}

func (s *promService) publish(d transport.Destination) error {
	return s.pub.Publish(context.Background(), d, transport.Message{Value: []byte("m")})
}

// scrapeBody GETs the service's /metrics.
func (s *promService) scrapeBody(t testing.TB) string {
	t.Helper()
	resp, err := http.Get(s.url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// TestPrometheusExposition checks the names, types and units of every instrument as
// Prometheus scrapes them: no suffix Prometheus reserves on a gauge, counters ending
// in _total, seconds in the name, the service named, no scope labels.
func TestPrometheusExposition(t *testing.T) {
	payments := transport.Destination{Broker: "sqs", Name: "payments"}
	s := newPromService(t, promConfig{
		policy: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second},
		regOpts: []registry.Option{registry.WithOverride("sqs:payments",
			registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second, Mode: breaker.FailOpen}})},
		opts: []telemetry.Option{telemetry.WithOutboxBacklog(backlogOf(outbox.DestinationBacklog{Destination: payments, Pending: 4, Oldest: 1500 * time.Millisecond}), 0)},
	})
	s.raw.set(payments, errDown)
	for range 3 {
		_ = s.publish(payments)
	}
	s.clock.Advance(5 * time.Second)
	s.m.RecordDispatch(payments, 0, 6, 0, 0)
	body := s.scrapeBody(t)

	lbl := `messaging_destination_name="payments",messaging_system="aws_sqs"`
	for _, want := range []string{
		"# TYPE brokerguard_circuit_open gauge",
		"brokerguard_circuit_open 1",
		"# TYPE brokerguard_circuit_failures gauge",
		"brokerguard_circuit_failures 2",
		"# TYPE brokerguard_circuit_state gauge",
		`brokerguard_circuit_state{brokerguard_circuit_mode="fail_open",brokerguard_circuit_state="open",` + lbl + `} 1`,
		`brokerguard_circuit_state{brokerguard_circuit_mode="fail_open",brokerguard_circuit_state="half_open",` + lbl + `} 0`,
		"# TYPE brokerguard_circuit_unhealthy_duration_seconds gauge",
		`brokerguard_circuit_unhealthy_duration_seconds{brokerguard_circuit_mode="fail_open",` + lbl + `} 5`,
		"# TYPE brokerguard_circuit_calls_total counter",
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="failed",` + lbl + `} 2`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="neutral",` + lbl + `} 1`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="rejected",` + lbl + `} 0`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="published",` + lbl + `} 0`,
		"# TYPE brokerguard_circuit_transitions_total counter",
		`brokerguard_circuit_transitions_total{brokerguard_circuit_state="open",` + lbl + `} 1`,
		"# TYPE brokerguard_circuit_bypassed_total counter",
		`brokerguard_circuit_bypassed_total{brokerguard_circuit_mode="fail_open",` + lbl + `} 1`,
		"# TYPE brokerguard_outbox_deferred_total counter",
		"brokerguard_outbox_deferred_total{" + lbl + "} 6",
		"# TYPE brokerguard_outbox_backlog gauge",
		"brokerguard_outbox_backlog{" + lbl + "} 4",
		"# TYPE brokerguard_outbox_oldest_pending_age_seconds gauge",
		"brokerguard_outbox_oldest_pending_age_seconds{" + lbl + "} 1.5",
		"# TYPE brokerguard_outbox_backlog_errors_total counter",
		"brokerguard_outbox_backlog_errors_total 0",
		`target_info{service_name="brokerguard-test"} 1`,
	} {
		if !hasLine(body, want) {
			t.Errorf("scrape lacks the line %q", want)
		}
	}
	for _, bad := range []string{"otel_scope_", "_ratio", "_count ", "unknown_service", "otel_metric_overflow"} {
		if strings.Contains(body, bad) {
			t.Errorf("scrape contains %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", body)
	}
}

func hasLine(body, line string) bool {
	for l := range strings.Lines(body) {
		if strings.TrimRight(l, "\n") == line {
			return true
		}
	}
	return false
}
