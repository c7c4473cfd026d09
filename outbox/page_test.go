package outbox_test

import (
	"testing"

	"github.com/brokerguard/brokerguard/outbox"
)

// A page limit is valid from 0 to MaxPageLimit, both included.
func TestPageLimitBounds(t *testing.T) {
	for limit, ok := range map[int]bool{-1: false, 0: true, outbox.MaxPageLimit: true, outbox.MaxPageLimit + 1: false} {
		if err := (outbox.Page{Limit: limit}).Validate(); (err == nil) != ok {
			t.Errorf("Page{Limit: %d}.Validate() = %v", limit, err)
		}
	}
}
