package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/harness"
)

// TestDemoShortRun runs the demo as a newcomer would (short mode) and checks that the
// outage opened only its topic's circuit, that the circuit recovered, that the summary
// proves nothing was lost, and that the timeline parses.
func TestDemoShortRun(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "timeline.svg")
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"demo", "--short", "--svg", svg}, &out, &errOut); err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errOut.String())
	}
	text := out.String()
	for _, want := range []string{
		"kafka:payments: closed -> open (failure_threshold)",
		"kafka:payments: half-open -> closed (probe_succeeded)",
		"nothing lost:",
		"timeline written to " + svg,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for _, healthy := range []string{"kafka:orders:", "kafka:audit:"} {
		if strings.Contains(text, healthy+" closed -> open") {
			t.Errorf("%s opened although only payments had an outage", healthy)
		}
	}
	raw, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	doc := parseSVG(t, string(raw))
	states := map[string]string{}
	for _, lane := range doc.Lanes {
		for _, r := range lane.Rects {
			states[lane.ID] += r.State + " "
		}
	}
	if !strings.Contains(states["lane-kafka:payments"], "open") || strings.Contains(states["lane-kafka:orders"], "open") {
		t.Fatalf("timeline states %v: want an open band for payments only", states)
	}
}

func TestDemoFlags(t *testing.T) {
	var out, errOut strings.Builder
	if err := run(context.Background(), nil, &out, &errOut); !errors.Is(err, errUsage) || !strings.Contains(errOut.String(), "usage: brokerguard COMMAND") {
		t.Fatalf("no subcommand: %v %q", err, errOut.String())
	}
	errOut.Reset()
	if err := run(context.Background(), []string{"demo", "--help"}, &out, &errOut); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"short", "duration", "topics", "outage-topic", "outage-start", "outage-length", "break", "rate",
		"svg", "metrics", "http", "plain", "kafka-brokers", "amqp-url", "sqs-endpoint", "database-url"} {
		if !strings.Contains(errOut.String(), "-"+f) {
			t.Errorf("--help does not explain -%s", f)
		}
	}
	for _, bad := range [][]string{{"demo", "--rate", "0"}, {"demo", "--topics", " , "}, {"demo", "extra"}, {"demo", "--no-such-flag"}} {
		if err := run(context.Background(), bad, &out, &strings.Builder{}); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// The same run with the outbox in PostgreSQL and metrics served. The metrics, scraped
// while the demo runs, count what its publishers did through the outage: failures,
// rejections and probes of the outage topic, under the demo's service name and
// without per-scope labels.
func TestDemoWithPostgresAndMetrics(t *testing.T) {
	dsn := harness.PostgresSchema(t)
	out := &syncBuffer{}
	var errOut strings.Builder
	args := []string{"demo", "--short", "--duration", "2s", "--outage-start", "500ms", "--outage-length", "700ms",
		"--database-url", dsn, "--metrics", "127.0.0.1:0", "--svg", ""}
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), args, out, &errOut) }()
	var last string // the last scrape that succeeded
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("demo: %v\n%s%s", err, out.String(), errOut.String())
			}
			running = false
		case <-tick.C:
			if m := metricsURL.FindStringSubmatch(out.String()); m != nil {
				if body, err := get(m[1]); err == nil {
					last = body
				}
			}
		}
	}
	for _, want := range []string{"metrics on http://127.0.0.1:", "nothing lost:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	payments := `messaging_destination_name="payments",messaging_system="kafka"`
	for _, series := range []string{
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="published",` + payments + `}`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="failed",` + payments + `}`,
		`brokerguard_circuit_probes_total{brokerguard_call_outcome="published",` + payments + `}`,
		`brokerguard_circuit_transitions_total{brokerguard_circuit_state="open",` + payments + `}`,
		`brokerguard_outbox_published_total{` + payments + `}`,
	} {
		if v := sampleValue(last, series); v <= 0 {
			t.Errorf("the last scrape has %s = %v, want it positive", series, v)
		}
	}
	if !strings.Contains(last, `target_info{service_name="brokerguard-demo"} 1`) || strings.Contains(last, "otel_scope_") {
		t.Errorf("the scrape does not name the service, or has per-scope labels")
	}
	if t.Failed() {
		t.Logf("last scrape:\n%s", last)
	}
}

var metricsURL = regexp.MustCompile(`metrics on (http://\S+/metrics)`)

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// sampleValue returns the value of the series in a Prometheus exposition, or -1.
func sampleValue(body, series string) float64 {
	for l := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// syncBuffer is a strings.Builder safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
