package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// TestOnCallReadingsMatchOnBothStores checks the holds and the dead rows by reason
// that an admin API reads, and that each reason counted picks its rows to page and
// requeue.
func TestOnCallReadingsMatchOnBothStores(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		s := sc.store.(interface {
			admin
			outbox.OnCall
		})
		ids := settleRows(t, sc, clock, []struct {
			dest transport.Destination
			end  string
		}{
			{orders, outbox.ReasonAttemptsExhausted + ": too large"},
			{orders, outbox.ReasonAttemptsExhausted + ": bad key"},
			{emails, outbox.ReasonDeferralExhausted},
			{emails, "attempts_exhaustedness"}, // shares the prefix, not the reason
			{emails, ""},
		})
		counts, err := s.DeadCounts(ctx)
		if got, want := fmt.Sprint(counts, err), "[{attempts_exhausted 2} {attempts_exhaustedness 1} {circuit_deferral_exhausted 1}] <nil>"; got != want {
			t.Errorf("DeadCounts = %s, want %s", got, want)
		}

		recs, err := s.DeadRows(ctx, outbox.DeadFilter{Reason: outbox.ReasonAttemptsExhausted}, outbox.Page{})
		if err != nil {
			t.Fatal(err)
		}
		if got := positions(recs, ids); fmt.Sprint(got) != "[0 1]" {
			t.Errorf("DeadRows by reason = rows %v, want [0 1]", got)
		}
		n, err := s.Requeue(ctx, outbox.DeadFilter{Destination: orders, Reason: outbox.ReasonAttemptsExhausted}, clock.Now())
		if n != 2 || err != nil {
			t.Errorf("Requeue by destination and reason = %d, %v; want 2", n, err)
		}

		if hs, err := s.Holds(ctx); len(hs) != 0 || err != nil {
			t.Errorf("Holds before any = %v, %v", hs, err)
		}
		now := clock.Now()
		for _, h := range []outbox.Hold{
			{Destination: orders, Now: now, Until: now.Add(30 * time.Second), MaxDeferral: time.Hour},
			{Destination: emails, Now: now, Until: now.Add(time.Minute), MaxDeferral: time.Hour},
		} {
			if _, err := s.Hold(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		hs, err := s.Holds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hs {
			got = append(got, fmt.Sprintf("%s until +%s since +%s", h.Destination, h.Until.Sub(now), h.Since.Sub(now)))
		}
		if want := "[kafka:emails until +1m0s since +0s kafka:orders until +30s since +0s]"; fmt.Sprint(got) != want {
			t.Errorf("Holds = %v, want %s", got, want)
		}
	})
}
