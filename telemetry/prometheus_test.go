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
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// TestPrometheusScrape serves the metrics through the OpenTelemetry Prometheus
// exporter and checks the scraped exposition: names, types and values.
func TestPrometheusScrape(t *testing.T) {
	clock := fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := telemetry.NewRecorder()
	reg, err := registry.New(breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second},
		registry.WithClock(clock), registry.WithObserver(rec.ObserveTransition))
	if err != nil {
		t.Fatal(err)
	}
	promReg := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(promReg), prometheus.WithoutScopeInfo(),
		prometheus.WithoutTargetInfo(), prometheus.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := telemetry.New(reg, telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp),
		telemetry.WithOutboxBacklog(func(context.Context) (int64, time.Duration, error) { return 4, 1500 * time.Millisecond, nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	srv := httptest.NewServer(promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	raw := &fakePublisher{}
	payments := transport.Destination{Broker: "sqs", Name: "payments"}
	raw.set(payments, errDown)
	pub := m.Instrument(reg.Guard(raw, nil), nil)
	for range 3 {
		_ = pub.Publish(context.Background(), payments, transport.Message{})
	}
	m.RecordDispatch(payments, 0, 6, 0, 0)

	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	lbl := `messaging_destination_name="payments",messaging_system="aws_sqs"`
	for _, want := range []string{
		"# TYPE brokerguard_circuit_open gauge",
		"brokerguard_circuit_open 1",
		"# TYPE brokerguard_circuit_failure_count gauge",
		"brokerguard_circuit_failure_count 2",
		"# TYPE brokerguard_circuit_state gauge",
		"brokerguard_circuit_state{" + lbl + `,state="open"} 1`,
		"brokerguard_circuit_state{" + lbl + `,state="closed"} 0`,
		"# TYPE brokerguard_circuit_failures_total counter",
		"brokerguard_circuit_failures_total{" + lbl + "} 2",
		"brokerguard_circuit_rejections_total{" + lbl + "} 1",
		"brokerguard_circuit_transitions_total{" + lbl + `,transition="opened"} 1`,
		"brokerguard_circuit_probes_total{" + lbl + `,outcome="success"} 0`,
		"# TYPE brokerguard_outbox_deferred_total counter",
		"brokerguard_outbox_deferred_total{" + lbl + "} 6",
		"brokerguard_outbox_backlog 4",
		"# TYPE brokerguard_outbox_oldest_pending_age_seconds gauge",
		"brokerguard_outbox_oldest_pending_age_seconds 1.5",
	} {
		if !hasLine(string(body), want) {
			t.Errorf("scrape lacks the line %q", want)
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
