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
		settleRows(t, sc, clock, []struct {
			dest transport.Destination
			end  string
		}{
			{orders, outbox.ReasonAttemptsExhausted + ": too large"},
			{orders, outbox.ReasonAttemptsExhausted + ": bad key"},
			{emails, outbox.ReasonDeferralExhausted},
			{emails, outbox.ReasonUndecodable + ": headers: not JSON"}, // the reason ends at the first ": "
			{emails, "attempts_exhaustedness"},                         // shares the prefix, not the reason
			{emails, "custom:detail"},                                  // no ": ", so all of it is the reason
			{emails, ""},
		})
		counts, err := s.DeadCounts(ctx)
		if got, want := fmt.Sprint(counts, err), "[{attempts_exhausted 2} {attempts_exhaustedness 1} {circuit_deferral_exhausted 1} {custom:detail 1} {undecodable 1}] <nil>"; got != want {
			t.Errorf("DeadCounts = %s, want %s", got, want)
		}
		// Each reason counted picks its rows, so that a person can requeue what they see.
		for _, c := range counts {
			recs, err := s.DeadRows(ctx, outbox.DeadFilter{Reason: c.Reason}, outbox.Page{})
			if int64(len(recs)) != c.Rows || err != nil {
				t.Errorf("DeadRows(reason %q) = %d rows, %v; counted %d", c.Reason, len(recs), err, c.Rows)
			}
		}

		if hs, err := s.Holds(ctx); len(hs) != 0 || err != nil {
			t.Errorf("Holds before any = %v, %v", hs, err)
		}
		now := clock.Now()
		for _, h := range []outbox.Hold{
			{Destination: orders, Now: now, Until: now.Add(30 * time.Second), MaxDeferral: time.Hour},
			{Destination: emails, Now: now, Until: now.Add(time.Minute), MaxDeferral: time.Hour, Reason: "403 ACCESS_REFUSED"},
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
			got = append(got, fmt.Sprintf("%s until +%s since +%s unusable %q", h.Destination, h.Until.Sub(now), h.Since.Sub(now), h.Unusable))
		}
		if want := `[kafka:emails until +1m0s since +0s unusable "403 ACCESS_REFUSED" kafka:orders until +30s since +0s unusable ""]`; fmt.Sprint(got) != want {
			t.Errorf("Holds = %v, want %s", got, want)
		}
		// The last hold's reason wins: an outage hold of an unusable destination says so.
		if _, err := s.Hold(ctx, outbox.Hold{Destination: emails, Now: now, Until: now.Add(time.Minute), MaxDeferral: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if hs, err := s.Holds(ctx); err != nil || hs[0].Destination != emails || hs[0].Unusable != "" {
			t.Errorf("after an outage hold: %+v, %v", hs, err)
		}
	})
}
