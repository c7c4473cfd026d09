package backend

import (
	"strconv"
	"time"
)

// LatestHold is the latest end a hold (ForceOpen, ForceClose) may have: shared
// backends keep times as Unix nanoseconds, which end in April 2262, and a later time
// would wrap into the past.
var LatestHold = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)

// HoldError reports a hold whose end cannot be used.
type HoldError struct {
	Until  time.Time
	Reason string
}

// Error says what is wrong with the hold's end.
func (e *HoldError) Error() string {
	return "breaker: a hold until " + e.Until.UTC().Format(time.RFC3339) + " " + e.Reason
}

// CheckHold returns a *HoldError unless a hold set at now until until ends after now,
// before LatestHold and, when maxHold is positive, at most maxHold after now. Every
// place that sets holds checks them with it (the admin handler, the shared-state
// engine and Operator, the CLI), so that a typo cannot hold a circuit for a century
// or store an end that reads as 1970.
func CheckHold(now, until time.Time, maxHold time.Duration) error {
	switch {
	case !until.After(now):
		return &HoldError{Until: until, Reason: "is not in the future"}
	case !until.Before(LatestHold) || until.Year() < 1970:
		return &HoldError{Until: until, Reason: "is outside the years 1970 to " + strconv.Itoa(LatestHold.Year()-1)}
	case maxHold > 0 && until.Sub(now) > maxHold:
		return &HoldError{Until: until, Reason: "is more than " + maxHold.String() + " ahead (the longest hold allowed)"}
	}
	return nil
}
