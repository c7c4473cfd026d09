//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation counts are
// only meaningful without it.

package telemetry_test

import (
	"context"
	"testing"

	"github.com/brokerguard/brokerguard/transport"
)

// TestPublishAllocations checks that telemetry adds no allocation to a successful or
// a rejected guarded publish.
func TestPublishAllocations(t *testing.T) {
	ctx, msgs := context.Background(), []transport.Message{{Value: []byte("v")}}
	allocs := func(pub transport.Publisher) float64 {
		_ = pub.Publish(ctx, orders, msgs...) // create the circuit and the record
		return testing.AllocsPerRun(200, func() { _ = pub.Publish(ctx, orders, msgs...) })
	}
	off, _ := guardedPublisher(t, noop, false)
	on, _ := guardedPublisher(t, noop, true)
	if a, b := allocs(off), allocs(on); b != a {
		t.Errorf("successful publish: %v allocations with telemetry, %v without", b, a)
	}
	off, _ = openCircuit(t, false)
	on, _ = openCircuit(t, true)
	if a, b := allocs(off), allocs(on); b != a {
		t.Errorf("rejected publish: %v allocations with telemetry, %v without", b, a)
	}
}
