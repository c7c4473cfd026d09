package mysqloutbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	bgmysql "github.com/brokerguard/brokerguard/outbox/mysql"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// surfaceStore is what the admin handler and telemetry read of a store.
type surfaceStore interface {
	outbox.Store
	outbox.DeadLetters
	outbox.OnCall
	BacklogByDestination(ctx context.Context) ([]outbox.DestinationBacklog, error)
}

// fill enqueues five rows through enqueue and leaves three dead (two of one reason),
// one pending of each destination, and emails held as unusable, all on clock.
func fill(t *testing.T, s surfaceStore, clock *fakeclock.Clock, enqueue func(...outbox.Entry) ([]int64, error)) {
	t.Helper()
	ctx := context.Background()
	var entries []outbox.Entry
	for _, d := range []transport.Destination{dests[0], dests[0], dests[1], dests[0], dests[1]} {
		entries = append(entries, outbox.Entry{Destination: d, Message: transport.Message{Value: []byte("value")}})
	}
	ids, err := enqueue(entries...)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Second)
	if recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: "t", Now: clock.Now(), Limit: 3, Lease: time.Minute, ProbeLimit: 1}); err != nil || len(recs) != 3 {
		t.Fatalf("Claim = %d, %v", len(recs), err)
	}
	if _, n, err := s.Fail(ctx, "t", []outbox.Failure{
		{ID: ids[0], RetryAt: clock.Now(), Dead: true, Err: outbox.ReasonAttemptsExhausted + ": too large"},
		{ID: ids[1], RetryAt: clock.Now(), Dead: true, Err: outbox.ReasonAttemptsExhausted + ": bad key"},
		{ID: ids[2], RetryAt: clock.Now(), Dead: true, Err: outbox.ReasonDeferralExhausted},
	}); n != 3 || err != nil {
		t.Fatalf("Fail = %d, %v", n, err)
	}
	if _, err := s.Hold(ctx, outbox.Hold{Destination: dests[1], Token: "t", Now: clock.Now(), Until: clock.Now().Add(45 * time.Second),
		MaxDeferral: time.Hour, Reason: "403 ACCESS_REFUSED"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
}

// surfaces returns what the admin handler answers on the outbox's endpoints, and the
// backlog gauges telemetry exports, for s.
func surfaces(t *testing.T, s surfaceStore, clock *fakeclock.Clock) string {
	t.Helper()
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second}}, registry.WithClock(clock), registry.WithCallCounts())
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(reg, admin.WithOutbox(s), admin.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, path := range []string{"/api/outbox", "/api/outbox/dead?limit=2", "/api/outbox/dead?reason=attempts_exhausted"} {
		rec, req := httptest.NewRecorder(), httptest.NewRequest("GET", path, nil)
		req.Host = "127.0.0.1"
		h.ServeHTTP(rec, req)
		body, _ := io.ReadAll(rec.Body)
		out.WriteString(path + " " + rec.Result().Status + "\n" + string(bytes.TrimSpace(body)) + "\n")
	}
	reader := sdkmetric.NewManualReader()
	m, err := telemetry.New(reg, telemetry.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		telemetry.WithClock(clock), telemetry.WithOutboxBacklog(s.BacklogByDestination, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var (
		rm     metricdata.ResourceMetrics
		gauges []string // in the order of the names and destinations
	)
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			if !strings.HasPrefix(metric.Name, "brokerguard.outbox.") {
				continue
			}
			switch d := metric.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value("messaging.destination.name")
					gauges = append(gauges, metric.Name+" "+v.AsString()+" "+strconv.FormatInt(p.Value, 10))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value("messaging.destination.name")
					gauges = append(gauges, metric.Name+" "+v.AsString()+" "+strconv.FormatFloat(p.Value, 'g', -1, 64))
				}
			}
		}
	}
	slices.Sort(gauges)
	return out.String() + strings.Join(gauges, "\n")
}

// The admin handler's outbox endpoints and the backlog gauges answer for the MySQL
// store exactly what they answer for the memory store (the reference every store's
// on-call answers are checked against) after the same operations at the same times.
func TestAdminAndTelemetryReadTheMySQLStoreAsTheMemoryStore(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	memClock := fakeclock.New(start)
	mem := memory.New(memClock)
	fill(t, mem, memClock, func(es ...outbox.Entry) ([]int64, error) { return mem.Enqueue(context.Background(), es...) })
	want := surfaces(t, mem, memClock)

	myClock := fakeclock.New(start)
	db, err := sql.Open("mysql", harness.MySQLDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := bgmysql.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	s, err := bgmysql.New(db, bgmysql.WithClock(myClock))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, myClock, func(es ...outbox.Entry) ([]int64, error) { return s.Enqueue(context.Background(), db, es...) })
	got := surfaces(t, s, myClock)
	if got != want {
		t.Fatalf("on MySQL:\n%s\non the memory store:\n%s", got, want)
	}
	if !strings.Contains(got, "brokerguard.outbox.") || !strings.Contains(got, `"reason": "attempts_exhausted"`) {
		t.Fatalf("the surfaces show no backlog gauge or dead row:\n%s", got)
	}
	t.Logf("both stores:\n%s", got)
}
