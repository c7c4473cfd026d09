package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// A retried outage (a limited circuit, still closed) met by the last row sent one at
// a time leaves nothing of that group to release, so the claim does not call Release:
// the rows it leaves leased on purpose, here those of a partition that refuses calls
// ("held alone, left leased"), stay leased until their lease ends.
func TestRetriedOutageOnTheLastRowKeepsHeldPartitionsRowsLeased(t *testing.T) {
	pub := &obRouterPub{refused: map[int]time.Time{1: t0.Add(time.Minute)}}
	f := routerFixtureWith(t, limitedPolicy, byFault, pub)
	var entries []outbox.Entry
	for _, m := range []transport.Message{
		{Key: []byte{1}, Value: []byte("held")}, // partition 1 refuses calls
		{Value: []byte("sent")},                 // unplaced: sent, not held by partition
		{Value: []byte("down")},
	} {
		entries = append(entries, outbox.Entry{Destination: orders, Message: m})
	}
	ids, err := f.store.Enqueue(context.Background(), entries...)
	if err != nil {
		t.Fatal(err)
	}
	pub.fn = func(msgs []transport.Message) error {
		switch {
		case len(msgs) > 1:
			return errors.New("one message is too large") // then one at a time
		case string(msgs[0].Value) == "down":
			return errBroker
		}
		return nil
	}
	rep := f.process(t)
	if c := rep.ByDestination[orders]; c.Published != 1 || c.Deferred != 1 || c.Failed+c.Dead != 0 {
		t.Errorf("counts %+v, want one published and the last deferred", c)
	}
	if r := f.get(t, ids[2]); r.Status != outbox.StatusPending || r.Deferrals != 1 {
		t.Errorf("last row %s with %d deferrals, want pending and deferred once", r.Status, r.Deferrals)
	}
	if r := f.get(t, ids[0]); r.Status != outbox.StatusPending || r.LeaseOwner == "" || r.Attempts != 0 || r.Deferrals != 0 {
		t.Errorf("refused partition's row: %s, lease %q, %d attempts, %d deferrals; want pending, still leased, untouched", r.Status, r.LeaseOwner, r.Attempts, r.Deferrals)
	}
}
