package telemetry_test

import (
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
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
