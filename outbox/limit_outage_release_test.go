package outbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// Rows sent one at a time after a message's failure, where one meets an outage that
// a limited circuit retries after a short pause (the row is deferred, not held), leave
// the rows after it to be released when the claim is done, not leased until the lease
// ends: the row deferred says nothing about the ones not sent.
func TestRetriedOutageWhileSendingOneAtATimeReleasesTheRest(t *testing.T) {
	f := obUnguardedFixtureOf(t, limitedPolicy)
	f.inner.fn = func(_ context.Context, _ transport.Destination, msgs []transport.Message) error {
		if len(msgs) > 1 {
			return errors.New("one message is too large")
		}
		return errBroker
	}
	ids := f.enqueue(t, orders, 3)
	rep := f.process(t)
	if c := rep.ByDestination[orders]; c.Deferred != 1 || c.Published+c.Failed+c.Dead != 0 {
		t.Errorf("counts %+v, want the first row deferred, nothing else", c)
	}
	if rep.Pause <= 0 {
		t.Errorf("pause %v, want the limit's short pause", rep.Pause)
	}
	if r := f.get(t, ids[0]); r.Status != outbox.StatusPending || r.Deferrals != 1 {
		t.Errorf("first row %s with %d deferrals, want pending and deferred once", r.Status, r.Deferrals)
	}
	obCheckGivenBack(t, f, ids[1:])
}
