// Package backend is for authors of circuits that keep their state outside the
// process (package breaker/sharedstate and its drivers) or that otherwise hand out
// breaker.Permit values of their own. Users of circuits never need it.
//
// It holds what every backend must do as the local breaker.Breaker does: hand out
// permits that report their first completion ([NewPermit], [Completer]), build the
// rejection of an open circuit ([NewOpenError]), pace a recovery ([NewRamp],
// [RampShare]), time a break ([BreakAfter]), compare policies across replicas
// ([Normalize], [Fingerprint]), keep a failure's text ([ErrorText]) and check an
// operator's hold ([CheckHold]). Package breaker/circuittest checks a backend
// against the local breaker's behaviour.
//
// Like package breaker, it imports only the standard library and this module.
package backend
