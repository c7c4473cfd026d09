package admin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
)

// The circuit JSON lists a destination's isolated partitions while they are
// isolated, with their last error; the transitions list their isolation and its end,
// naming the partition.
func TestCircuitListsIsolatedPartitions(t *testing.T) {
	f := newFixture(t)
	ps, err := f.reg.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	ps.SetCount(6)
	ps.Complete(0, breaker.Success)
	for range 2 { // the fixture's FailureThreshold
		ps.CompleteWith(4, breaker.Failure, errors.New("kafka: not leader for partition"))
	}
	f.clock.Advance(400 * time.Millisecond) // isolated for a second (registry.MaxDefaultPartitionIsolation)
	code, c := f.do(t, req{method: "GET", path: "/api/circuits/kafka:orders"})
	iso, _ := c["isolated_partitions"].([]any)
	if code != 200 || len(iso) != 1 {
		t.Fatalf("one circuit: %d %v", code, c)
	}
	p := iso[0].(map[string]any)
	if p["partition"].(float64) != 4 || p["remaining_ms"].(float64) != 600 || p["failures"].(float64) != 2 ||
		p["last_error"] != "kafka: not leader for partition" {
		t.Fatalf("isolated partition view = %v", p)
	}
	_, body := f.do(t, req{method: "GET", path: "/api/circuits"})
	if got := body["circuits"].([]any)[0].(map[string]any)["isolated_partitions"]; got == nil {
		t.Fatalf("the list shows no isolated partition: %v", body)
	}
	ps.Complete(4, breaker.Success)
	if _, c := f.do(t, req{method: "GET", path: "/api/circuits/kafka:orders"}); c["isolated_partitions"] != nil {
		t.Fatalf("a healed partition is still listed: %v", c)
	}
	_, body = f.do(t, req{method: "GET", path: "/api/transitions"})
	ts := body["transitions"].([]any)
	if len(ts) != 2 {
		t.Fatalf("transitions %v; want the isolation and its end", ts)
	}
	for i, want := range []string{registry.ReasonPartitionHealed, registry.ReasonPartitionIsolated} {
		tr := ts[i].(map[string]any)
		if tr["destination"] != "kafka:orders" || tr["partition"] != 4.0 || tr["reason"] != want {
			t.Errorf("transition %d = %v; want partition 4 %s", i, tr, want)
		}
	}
}

// A partition's event between the steps of its circuit's probe cycles does not end
// the event that collapses them.
func TestJournalProbeCyclesAcrossPartitionEvents(t *testing.T) {
	j := admin.NewJournal(16)
	at := t0
	rec := func(id string, from, to breaker.State, reason string) {
		at = at.Add(time.Second)
		j.Record(orders, breaker.Transition{Identity: id, From: from, To: to, At: at, Reason: reason})
	}
	rec("kafka:orders", breaker.Closed, breaker.Open, breaker.ReasonFailureThreshold)
	rec("kafka:orders", breaker.Open, breaker.HalfOpen, breaker.ReasonBreakElapsed)
	rec("kafka:orders/1", breaker.Closed, breaker.Open, registry.ReasonPartitionIsolated)
	rec("kafka:orders", breaker.HalfOpen, breaker.Open, breaker.ReasonProbeFailed)
	rec("kafka:orders", breaker.Open, breaker.HalfOpen, breaker.ReasonBreakElapsed)
	got := j.Recent(16)
	if len(got) != 3 || got[0].Reason != registry.ReasonPartitionIsolated || got[1].Cycles != 2 || got[1].FailedProbes != 1 {
		t.Fatalf("journal: %+v", got)
	}
}

// A partition's refusal names "kafka:orders/4": reading that name answers the topic's
// circuit, which lists the partition; a hold must name the topic itself.
func TestCircuitNamedByAPartition(t *testing.T) {
	f := newFixture(t, admin.WithMutations(token))
	ps, err := f.reg.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	ps.SetCount(6)
	ps.Complete(0, breaker.Success)
	for range 2 {
		ps.Complete(4, breaker.Failure)
	}
	code, c := f.do(t, req{method: "GET", path: "/api/circuits/kafka:orders%2F4"})
	if iso, _ := c["isolated_partitions"].([]any); code != 200 || c["destination"] != "kafka:orders" || len(iso) != 1 {
		t.Fatalf("GET kafka:orders/4: %d %v; want the topic's circuit with partition 4", code, c)
	}
	for _, path := range []string{"/api/circuits/kafka:orders%2Fx", "/api/circuits/kafka:refunds%2F4", "/api/circuits/kafka:orders%2F-1"} {
		if code, _ := f.do(t, req{method: "GET", path: path}); code != 404 {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
	if code, _ := f.do(t, req{method: "POST", path: "/api/circuits/kafka:orders%2F4/force-open", body: `{"for":"1m","reason":"x"}`, header: authJSON()}); code != 404 {
		t.Errorf("a hold named by a partition: %d, want 404", code)
	}
}
