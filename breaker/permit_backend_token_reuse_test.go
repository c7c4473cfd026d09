package breaker

import "testing"

// A backend permit's completion gives its token back to the pool, so that a backend
// (another process's circuit, a table) pays no allocation a call for its permits:
// NewPermit then Complete, or Drop, allocates nothing. (AllocsPerRun rounds down: the
// race detector's pool, which drops a quarter of what it is given, stays under one
// allocation a call.)
func TestBackendPermitCompletionGivesTheTokenBack(t *testing.T) {
	calls := 0
	c := &mb4NopCompleter{calls: &calls}
	for _, tc := range []struct {
		name     string
		complete func(Permit) bool
	}{
		{"Complete", func(p Permit) bool { return p.Complete(Success) }},
		{"Drop", func(p Permit) bool { return p.Drop() }},
	} {
		got := testing.AllocsPerRun(1000, func() {
			if !tc.complete(NewPermit(c, PermitInfo{Generation: 1})) {
				t.Fatalf("%s of a new backend permit was not live", tc.name)
			}
		})
		if got > 0 {
			t.Errorf("%s: %v allocations a backend permit, want none", tc.name, got)
		}
	}
}
