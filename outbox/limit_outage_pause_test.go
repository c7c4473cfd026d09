package outbox_test

import (
	"context"
	"testing"

	"github.com/brokerguard/brokerguard/transport"
)

// A whole batch that meets an outage a closed limited circuit retries is written back
// (deferred), and the claim still asks Run for the limit's short pause before the next
// one: without it Run would claim the same rows again at once and spend the circuit's
// evidence on a broker that has just failed.
func TestRetriedOutageOfAWholeBatchAsksForThePause(t *testing.T) {
	f := obUnguardedFixtureOf(t, limitedPolicy)
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errBroker }
	f.enqueue(t, orders, 3)
	rep := f.process(t)
	if c := rep.ByDestination[orders]; c.Deferred != 3 || c.Published+c.Failed+c.Dead != 0 {
		t.Fatalf("counts %+v, want the 3 rows deferred, nothing else", c)
	}
	if rep.Pause <= 0 {
		t.Errorf("pause %v after a retried outage, want the limit's short pause", rep.Pause)
	}
}
