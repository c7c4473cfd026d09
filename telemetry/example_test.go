package telemetry_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// publisherFunc adapts a function to transport.Publisher.
type publisherFunc func(context.Context, transport.Destination, ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}

// downPayments is a publisher whose "payments" topic is unreachable.
var downPayments = publisherFunc(func(_ context.Context, d transport.Destination, _ ...transport.Message) error {
	if d.Name == "payments" {
		return errors.New("connection refused")
	}
	return nil
})

// The Recorder comes first so the registry can be given its ObserveTransition; New
// then exports the registry's circuits and the Recorder's counts.
func ExampleNew() {
	rec := telemetry.NewRecorder()
	reg, err := registry.New(breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second},
		registry.WithObserver(rec.ObserveTransition))
	if err != nil {
		panic(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := telemetry.New(reg, telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	defer m.Close()
	pub := m.Instrument(reg.Guard(downPayments, nil), nil) // outside the guard: it sees rejections

	payments := transport.Destination{Broker: "kafka", Name: "payments"}
	for range 3 {
		_ = pub.Publish(context.Background(), payments, transport.Message{Value: []byte("charge")})
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			switch data := metric.Data.(type) {
			case metricdata.Gauge[int64]:
				if metric.Name == "brokerguard.circuit.open" {
					fmt.Println(metric.Name, data.DataPoints[0].Value)
				}
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					if tr, ok := p.Attributes.Value("transition"); ok && tr.AsString() != "opened" {
						continue
					}
					if _, ok := p.Attributes.Value("outcome"); !ok {
						fmt.Println(metric.Name, p.Value)
					}
				}
			}
		}
	}
	// Unordered output:
	// brokerguard.circuit.open 1
	// brokerguard.circuit.failures 2
	// brokerguard.circuit.rejections 1
	// brokerguard.circuit.transitions 1
}

// Serving the metrics to Prometheus: the OpenTelemetry Prometheus exporter is a
// reader of the MeterProvider and a collector of a Prometheus registry, which
// promhttp serves on /metrics.
func Example_prometheus() {
	rec := telemetry.NewRecorder()
	reg, err := registry.New(breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second},
		registry.WithObserver(rec.ObserveTransition))
	if err != nil {
		panic(err)
	}
	promReg := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(promReg), prometheus.WithoutScopeInfo(),
		prometheus.WithoutTargetInfo(), prometheus.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	m, err := telemetry.New(reg, telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	defer m.Close()

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux) // a program would run http.ListenAndServe(":9090", mux)
	defer srv.Close()

	pub := m.Instrument(reg.Guard(downPayments, nil), nil)
	for _, name := range []string{"payments", "payments", "orders"} {
		_ = pub.Publish(context.Background(), transport.Destination{Broker: "kafka", Name: name}, transport.Message{})
	}

	lines, err := scrape(srv.URL+"/metrics", "brokerguard_circuit_state", "brokerguard_circuit_open")
	if err != nil {
		panic(err)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// brokerguard_circuit_open 1
	// brokerguard_circuit_state{messaging_destination_name="orders",messaging_system="kafka",state="closed"} 1
	// brokerguard_circuit_state{messaging_destination_name="orders",messaging_system="kafka",state="half-open"} 0
	// brokerguard_circuit_state{messaging_destination_name="orders",messaging_system="kafka",state="open"} 0
	// brokerguard_circuit_state{messaging_destination_name="payments",messaging_system="kafka",state="closed"} 0
	// brokerguard_circuit_state{messaging_destination_name="payments",messaging_system="kafka",state="half-open"} 0
	// brokerguard_circuit_state{messaging_destination_name="payments",messaging_system="kafka",state="open"} 1
}

// scrape GETs url and returns its sample lines (not comments) whose metric name is
// one of names.
func scrape(url string, names ...string) ([]string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		name, _, _ := strings.Cut(l, " ")
		name, _, _ = strings.Cut(name, "{")
		for _, n := range names {
			if name == n {
				lines = append(lines, l)
			}
		}
	}
	return lines, sc.Err()
}
