package admission_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/brokerguard/brokerguard/admission"
)

// A destination's limit in two steps: Acquire a slot for a call's messages, release
// it with how the call ended. A call over the limit is refused at once, and an outbox
// drain (bulk work) takes only what online calls leave.
func Example() {
	lim := admission.NewLimiter(admission.LimitPolicy{Max: 10, BulkShare: 0.5}, nil)
	ctx := admission.WithPriority(context.Background(), admission.Bulk)

	fmt.Println("bulk headroom:", lim.BulkHeadroom())
	batch, err := lim.Acquire(lim.BulkHeadroom(), admission.PriorityOf(ctx))
	if err != nil {
		panic(err)
	}
	_, err = lim.Acquire(1, admission.Bulk)
	var le *admission.LimitError
	fmt.Println("another bulk call refused:", errors.As(err, &le) && le.Bulk)

	online, err := lim.Acquire(10, admission.Online) // online calls keep the whole limit
	fmt.Println("online call admitted:", err == nil)

	online.Release(admission.Success)
	batch.Release(admission.Success)
	fmt.Println("in flight:", lim.Stats().InFlight)
	// Output:
	// bulk headroom: 5
	// another bulk call refused: true
	// online call admitted: true
	// in flight: 0
}
