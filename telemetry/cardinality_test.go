package telemetry_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// TestEveryLiveCircuitExported fills the registry to its default cap, 10,000 live
// circuits, a third of them open, and checks that a scrape through the Prometheus
// exporter has every one of them in every per-destination instrument, and nothing in
// the SDK's overflow series, when the provider's cardinality limit is
// telemetry.CardinalityLimit of the cap. With the SDK's default limit (2,000 series per
// instrument) a scrape of 1,000 destinations already loses some to the overflow
// series: the limit is what keeps the cap's promise.
func TestEveryLiveCircuitExported(t *testing.T) {
	if testing.Short() {
		t.Skip("scrapes 10,000 circuits, a minute or more under the race detector; run without -short (make test does)")
	}
	for _, tc := range []struct {
		name  string
		n     int // live circuits
		limit int // 0: telemetry.CardinalityLimit of the default cap
		all   bool
	}{
		{name: "telemetry.CardinalityLimit", n: registry.DefaultMaxDestinations, all: true},
		{name: "SDK default limit", n: 1000, limit: 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.n
			s := newPromService(t, promConfig{policy: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, limit: tc.limit})
			dests := make([]transport.Destination, n)
			for i := range dests {
				dests[i] = transport.Destination{Broker: "kafka", Name: fmt.Sprintf("topic-%05d", i)}
				if i%3 == 0 {
					s.raw.set(dests[i], errDown)
				}
				_ = s.publish(dests[i])
			}
			if err := s.publish(transport.Destination{Broker: "kafka", Name: "one-too-many"}); tc.all && !errors.Is(err, registry.ErrTooManyDestinations) {
				t.Fatalf("publish past the cap: %v", err)
			}
			body := s.scrapeBody(t)
			perDest := map[string]map[string]int{} // metric -> destination -> series
			for line := range strings.Lines(body) {
				name, rest, ok := strings.Cut(line, "{")
				if !ok || !strings.HasPrefix(name, "brokerguard_circuit_") {
					continue
				}
				_, d, ok := strings.Cut(rest, `messaging_destination_name="`)
				if !ok {
					continue
				}
				d, _, _ = strings.Cut(d, `"`)
				if perDest[name] == nil {
					perDest[name] = map[string]int{}
				}
				perDest[name][d]++
			}
			for metric, series := range map[string]int{
				"brokerguard_circuit_state":                      3,
				"brokerguard_circuit_unhealthy_duration_seconds": 1,
				"brokerguard_circuit_calls_total":                4,
			} {
				got, full := perDest[metric], 0
				for _, k := range got {
					if k == series {
						full++
					}
				}
				if tc.all && (len(got) != n || full != n) {
					t.Errorf("%s: %d destinations, %d with all %d series; want all %d", metric, len(got), full, series, n)
				}
				if !tc.all && full == n {
					t.Errorf("%s: every destination exported under the SDK's default limit; the test no longer shows why the limit is needed", metric)
				}
			}
			if overflow := strings.Contains(body, `otel_metric_overflow="true"`); overflow != !tc.all {
				t.Errorf("overflow series present: %v, want %v", overflow, !tc.all)
			}
			if tc.all && !hasLine(body, fmt.Sprintf("brokerguard_circuit_open %d", (n+2)/3)) {
				t.Errorf("brokerguard_circuit_open is not %d", (n+2)/3)
			}
		})
	}
}
