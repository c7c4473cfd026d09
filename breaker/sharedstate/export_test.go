package sharedstate

// SetTestHookRefused sets testHookRefused for the external tests, and returns the
// function that unsets it.
func SetTestHookRefused(f func()) (unset func()) {
	testHookRefused = f
	return func() { testHookRefused = nil }
}
