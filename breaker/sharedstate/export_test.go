package sharedstate

// MsSetTestHookRefused sets testHookRefused for the external tests, and returns the
// function that unsets it.
func MsSetTestHookRefused(f func()) (unset func()) {
	testHookRefused = f
	return func() { testHookRefused = nil }
}
