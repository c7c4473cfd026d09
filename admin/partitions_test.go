package admin_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// The circuit JSON lists a destination's isolated partitions while they are isolated.
func TestCircuitListsIsolatedPartitions(t *testing.T) {
	f := newFixture(t)
	ps, err := f.reg.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	ps.SetCount(6)
	for range 2 { // the fixture's FailureThreshold
		ps.Complete(4, breaker.Failure)
	}
	f.clock.Advance(10 * time.Second)
	code, c := f.do(t, req{method: "GET", path: "/api/circuits/kafka:orders"})
	iso, _ := c["isolated_partitions"].([]any)
	if code != 200 || len(iso) != 1 {
		t.Fatalf("one circuit: %d %v", code, c)
	}
	p := iso[0].(map[string]any)
	if p["partition"].(float64) != 4 || p["remaining_ms"].(float64) != 20000 || p["failures"].(float64) != 2 {
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
}
