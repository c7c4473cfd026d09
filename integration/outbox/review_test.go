package outbox_test

import (
	"context"
	"slices"
	"testing"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// The Processor writes a dead row's LastError as "reason: detail" (only
// ReasonDeferralExhausted has no detail), so a filter by reason must find the rows
// of every documented reason, not only those whose LastError is the bare reason.
func TestDeadRowsFilteredByReasonWithDetail(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		s := sc.store.(admin)
		ids := settleRows(t, sc, clock, []struct {
			dest transport.Destination
			end  string
		}{
			{orders, outbox.ReasonAttemptsExhausted + ": message too large"},
			{emails, outbox.ReasonUndecodable + ": headers: invalid character"},
			{orders, outbox.ReasonDeferralExhausted},
			{orders, outbox.ReasonAttemptsExhausted + "_not: a reason of its own"},
			{emails, outbox.ReasonAttemptsExhausted + ": bad key"},
		})
		for _, tc := range []struct {
			filter outbox.DeadFilter
			want   []int
		}{
			{outbox.DeadFilter{Reason: outbox.ReasonAttemptsExhausted}, []int{0, 4}},
			{outbox.DeadFilter{Reason: outbox.ReasonUndecodable}, []int{1}},
			{outbox.DeadFilter{Reason: outbox.ReasonDeferralExhausted}, []int{2}},
			{outbox.DeadFilter{Reason: outbox.ReasonAttemptsExhausted + ": bad key"}, []int{4}},
		} {
			recs, err := s.DeadRows(ctx, tc.filter, outbox.Page{})
			if got := positions(recs, ids); err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("DeadRows(reason %q) = rows %v, %v; want %v", tc.filter.Reason, got, err, tc.want)
			}
		}
		n, err := s.Requeue(ctx, outbox.DeadFilter{Destination: orders, Reason: outbox.ReasonAttemptsExhausted}, clock.Now())
		if n != 1 || err != nil {
			t.Fatalf("Requeue(orders, %s) = %d, %v; want 1 row", outbox.ReasonAttemptsExhausted, n, err)
		}
		if r := sc.get(t, ids[0]); r.Status != outbox.StatusPending {
			t.Errorf("requeued row is %s", r.Status)
		}
	})
}
