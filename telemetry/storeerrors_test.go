package telemetry_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestStoreErrors checks brokerguard.outbox.store.errors: absent before the first
// error, then every operation (zeros included), an unknown operation as "other", and
// nothing counted after Close.
func TestStoreErrors(t *testing.T) {
	e := newEnv(t, breaker.DisabledPolicy(), nil)
	const name = "brokerguard.outbox.store.errors"
	if got := e.collect().matching(name); len(got) != 0 {
		t.Fatalf("series before any error: %v", got)
	}
	e.m.RecordStoreError(outbox.OpClaim)
	e.m.RecordStoreError(outbox.OpClaim)
	e.m.RecordStoreError(outbox.OpMarkPublished)
	e.m.RecordStoreError("something new")
	c := e.collect()
	want := map[string]float64{}
	for _, op := range []string{"claim", "mark_published", "defer", "fail", "hold", "unhold", "release", "backlog", "delete_settled", "other"} {
		want[name+"{brokerguard.outbox.operation="+op+"}"] = 0
	}
	want[name+"{brokerguard.outbox.operation=claim}"] = 2
	want[name+"{brokerguard.outbox.operation=mark_published}"] = 1
	want[name+"{brokerguard.outbox.operation=other}"] = 1
	equalSeries(t, "after errors", want, c.matching(name))
	if got, w := c.instruments[name], (instrument{kind: "counter", unit: "{error}", described: true}); got != w {
		t.Errorf("instrument %s is %+v, want %+v", name, got, w)
	}
	var _ outbox.StoreErrorHooks = e.m
}

// TestStoreErrorAlertThroughADatabaseOutage stops a PostgreSQL cluster of the test's
// own under a running Processor whose hooks are the Metrics: Run does not end, the
// store error counter moves, BrokerguardOutboxStoreErrors fires in a real Prometheus
// (rules sped up 30 times), and once the cluster is back every row goes out and the
// alert resolves.
func TestStoreErrorAlertThroughADatabaseOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs PostgreSQL and Prometheus servers for about 30 seconds; not in -short")
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	cluster := harness.NewPostgresCluster(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.DSN()+"&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(pool)
	s := newPromService(t, promConfig{policy: breaker.DisabledPolicy()})
	// The error backoff's cap stays well inside the rule's window (2 minutes, 4 s
	// here); at real speed the default 5 s cap does.
	proc, err := outbox.NewProcessor(store, s.reg, s.pub, outbox.WithHooks(s.m),
		outbox.WithClassifier(func(error) breaker.Outcome { return breaker.Failure }),
		outbox.WithErrorBackoff(outbox.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- proc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	enqueue := func(n int) {
		t.Helper()
		entries := make([]outbox.Entry, n)
		for i := range entries {
			entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("m")}}
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := store.Enqueue(ctx, postgres.Pgx(tx), entries...)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	pending := func() int64 {
		n, _, err := store.Backlog(ctx)
		if err != nil {
			return -1
		}
		return n
	}

	api := promAPI{t: t, base: harness.Prometheus(t, scrapeConfig(s), map[string]string{"rules.yml": fastRules(t, string(rules))})}
	enqueue(50)
	waitFor(t, "the first rows to go out", 20*time.Second, func() bool { return pending() == 0 })
	waitFor(t, "Prometheus to scrape the service", 20*time.Second, func() bool {
		n, err := api.query(`brokerguard_outbox_published_total{job="brokerguard-test"}`)
		return err == nil && n > 0
	})
	const alert = "BrokerguardOutboxStoreErrors/"
	if a := api.alerts(); len(a) > 0 {
		t.Fatalf("alerts before the outage: %+v", a)
	}

	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the store error counter in Prometheus", 20*time.Second, func() bool {
		n, err := api.query(`brokerguard_outbox_store_errors_total{brokerguard_outbox_operation="claim"} > 0`)
		return err == nil && n > 0
	})
	waitFor(t, alert+" to fire", 30*time.Second, func() bool { return api.alerts()[alert].State == "firing" })

	if err := cluster.Start(); err != nil {
		t.Fatal(err)
	}
	enqueue(50)
	waitFor(t, "every row to go out after the outage", 30*time.Second, func() bool { return pending() == 0 })
	waitFor(t, alert+" to resolve", 30*time.Second, func() bool { _, firing := api.alerts()[alert]; return !firing })
}

// scrapeConfig is a Prometheus configuration that scrapes s every second as job
// brokerguard-test and evaluates rules.yml every second.
func scrapeConfig(s *promService) string {
	target := strings.TrimPrefix(strings.TrimSuffix(s.url, "/metrics"), "http://")
	return fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: brokerguard-test
    static_configs:
      - targets: [%q]
`, target)
}
