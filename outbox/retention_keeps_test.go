package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/outbox"
)

// A Retention period of 0 keeps the rows of that status: its cutoff is the zero time,
// and Purge deletes none of them however old they are.
func TestRetentionOfZeroKeepsThatStatus(t *testing.T) {
	f := newFixture(t, policy)
	now := f.clock.Now()
	if p, d := (outbox.Retention{Dead: time.Hour}).Cutoffs(now); !p.IsZero() || !d.Equal(now.Add(-time.Hour)) {
		t.Errorf("Cutoffs with Published 0 = %v, %v; want the zero time and an hour ago", p, d)
	}
	if p, d := (outbox.Retention{Published: time.Hour}).Cutoffs(now); !p.Equal(now.Add(-time.Hour)) || !d.IsZero() {
		t.Errorf("Cutoffs with Dead 0 = %v, %v; want an hour ago and the zero time", p, d)
	}

	f.enqueue(t, orders, 3)
	f.process(t)
	f.clock.Advance(24 * time.Hour)
	if n, err := outbox.Purge(context.Background(), f.store, outbox.Retention{Dead: time.Minute}, f.clock.Now()); n != 0 || err != nil {
		t.Fatalf("Purge with Published 0 = %d, %v; want the published rows kept", n, err)
	}
	if n := len(f.store.Records()); n != 3 {
		t.Fatalf("%d rows left, want the 3 published rows kept", n)
	}
}
