package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/integration/harness"
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
		"svg", "metrics", "kafka-brokers", "amqp-url", "sqs-endpoint", "database-url"} {
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

// The same run with the outbox in PostgreSQL and metrics served.
func TestDemoWithPostgresAndMetrics(t *testing.T) {
	dsn := harness.PostgresSchema(t)
	var out, errOut strings.Builder
	args := []string{"demo", "--short", "--duration", "2s", "--outage-start", "500ms", "--outage-length", "700ms",
		"--database-url", dsn, "--metrics", "127.0.0.1:0", "--svg", ""}
	if err := run(context.Background(), args, &out, &errOut); err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{"metrics on http://127.0.0.1:", "nothing lost:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
