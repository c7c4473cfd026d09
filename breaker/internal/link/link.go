// Package link hands package breaker/backend the parts of package breaker that only
// authors of circuits need, so that they stay out of breaker's index. Package
// breaker sets the variables in its init (breaker/link.go); backend reads each once,
// with its func type written out, when it is initialized. Nothing else may use it.
package link

// PermitInfo is what a backend gets back when its permit completes (backend.PermitInfo).
type PermitInfo struct {
	Generation uint64 // as given to NewPermit
	Probe      bool   // as given to NewPermit
	Lease      uint64 // as given to NewPermit: the backend's own reference
}

// The functions breaker lends; their types name breaker's types, which this package
// cannot import. Package backend asserts each to its type (backend.go).
var (
	NewPermit    any // func(c any, info PermitInfo) breaker.Permit
	NewOpenError any // func(identity string, scope breaker.Scope, notBefore time.Time) *breaker.OpenError
	NewRamp      any // func(identity string, p breaker.Policy, closedAt time.Time, seed uint64) (admit, refuse, until)
	Normalize    any // func(breaker.Policy) breaker.Policy
	RampShare    any // func(p breaker.Policy, since time.Duration) float64
	BreakAfter   any // func(p breaker.Policy, failedProbes int, random func() float64) time.Duration
)
