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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"

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

// The Recorder comes first so the registry can be built with its options (its
// transition observer, and call counting); New then exports the registry's circuits
// and the Recorder's counts.
func ExampleNew() {
	rec := telemetry.NewRecorder()
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second}}, rec.RegistryOptions()...)
	if err != nil {
		panic(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader),
		sdkmetric.WithCardinalityLimit(telemetry.CardinalityLimit(registry.DefaultMaxDestinations)))
	defer mp.Shutdown(context.Background())
	m, err := telemetry.New(reg, telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	defer m.Close()
	pub := reg.Guard(downPayments, nil) // the registry counts its calls

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
			if metric.Name != "brokerguard.circuit.calls" {
				continue
			}
			for _, p := range metric.Data.(metricdata.Sum[int64]).DataPoints {
				outcome, _ := p.Attributes.Value("brokerguard.call.outcome")
				fmt.Println(outcome.AsString(), p.Value)
			}
		}
	}
	// Unordered output:
	// published 0
	// failed 2
	// rejected 1
	// neutral 0
}

// Serving the metrics to Prometheus: the OpenTelemetry Prometheus exporter is a
// reader of the MeterProvider and a collector of a Prometheus registry, which
// promhttp serves on /metrics. The provider's cardinality limit lets every live
// circuit through; the resource names the service.
func Example_prometheus() {
	rec := telemetry.NewRecorder()
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second}}, rec.RegistryOptions()...)
	if err != nil {
		panic(err)
	}
	promReg := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(promReg), prometheus.WithoutScopeInfo(),
		prometheus.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", "checkout"))),
		sdkmetric.WithCardinalityLimit(telemetry.CardinalityLimit(registry.DefaultMaxDestinations)))
	defer mp.Shutdown(context.Background())
	m, err := telemetry.New(reg, telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	defer m.Close()

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux) // a program would run http.ListenAndServe(":9464", mux)
	defer srv.Close()

	pub := reg.Guard(downPayments, nil)
	for _, name := range []string{"payments", "payments", "orders"} {
		_ = pub.Publish(context.Background(), transport.Destination{Broker: "kafka", Name: name}, transport.Message{})
	}

	lines, err := scrape(srv.URL+"/metrics", "brokerguard_circuit_state", "brokerguard_circuit_open", "target_info")
	if err != nil {
		panic(err)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// brokerguard_circuit_open 1
	// brokerguard_circuit_state{brokerguard_circuit_mode="enforce",brokerguard_circuit_state="closed",messaging_destination_name="orders",messaging_system="kafka"} 1
	// brokerguard_circuit_state{brokerguard_circuit_mode="enforce",brokerguard_circuit_state="closed",messaging_destination_name="payments",messaging_system="kafka"} 0
	// brokerguard_circuit_state{brokerguard_circuit_mode="enforce",brokerguard_circuit_state="half_open",messaging_destination_name="orders",messaging_system="kafka"} 0
	// brokerguard_circuit_state{brokerguard_circuit_mode="enforce",brokerguard_circuit_state="half_open",messaging_destination_name="payments",messaging_system="kafka"} 0
	// brokerguard_circuit_state{brokerguard_circuit_mode="enforce",brokerguard_circuit_state="open",messaging_destination_name="orders",messaging_system="kafka"} 0
	// brokerguard_circuit_state{brokerguard_circuit_mode="enforce",brokerguard_circuit_state="open",messaging_destination_name="payments",messaging_system="kafka"} 1
	// target_info{service_name="checkout"} 1
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
