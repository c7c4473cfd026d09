package storekit_test

import (
	"errors"
	"testing"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/storekit"
)

func TestParseStatus(t *testing.T) {
	for _, s := range []outbox.Status{outbox.StatusPending, outbox.StatusPublished, outbox.StatusDead} {
		if got, err := storekit.ParseStatus(1, string(s)); got != s || err != nil {
			t.Errorf("ParseStatus(%q) = %q, %v", s, got, err)
		}
	}
	_, err := storekit.ParseStatus(42, "archived")
	var use *storekit.UnknownStatusError
	if !errors.Is(err, storekit.ErrUnknownStatus) || !errors.As(err, &use) || use.ID != 42 || use.Status != "archived" {
		t.Fatalf("ParseStatus(42, archived) = %v; want an UnknownStatusError naming the row", err)
	}
	if want := `outbox: row 42 has unknown status "archived"`; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
}

// A page limit is valid from 0 to MaxPageLimit, both included.
func TestCheckDeadPageLimitBounds(t *testing.T) {
	for limit, ok := range map[int]bool{-1: false, 0: true, outbox.MaxPageLimit: true, outbox.MaxPageLimit + 1: false} {
		if err := storekit.CheckDeadPage(outbox.DeadFilter{}, outbox.Page{Limit: limit}); (err == nil) != ok {
			t.Errorf("CheckDeadPage(Page{Limit: %d}) = %v", limit, err)
		}
	}
}
