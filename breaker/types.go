package breaker

import "strconv"

// State is the position of a circuit in its state machine.
type State int32

// The states of a circuit.
const (
	// Closed admits calls and collects failure evidence.
	Closed State = iota
	// Open rejects calls until its deadline passes.
	Open
	// HalfOpen admits a bounded number of probes whose outcomes decide whether the
	// circuit closes or opens again.
	HalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Outcome is what a completed call says about the health of the dependency and, for
// a failed call, whose fault it was.
//
// A circuit counts only Success and Failure: every other Outcome is Neutral to it (no
// counts, no state change, a probe's slot freed). Rejected and Unusable tell callers
// that keep messages (the outbox) and the people on call what the error was about:
// the message (Rejected, worth an attempt of that message) or the destination
// (Unusable, where every message would fail until someone fixes it).
type Outcome uint8

// The outcomes a caller reports through [Permit.Complete]. The zero Outcome is treated
// as Neutral.
const (
	// Success is evidence that the dependency is healthy.
	Success Outcome = iota + 1
	// Failure is evidence that the dependency, or the path to it, is unhealthy.
	Failure
	// Neutral says nothing about the dependency: the caller gave up, the input was
	// bad, or the error belongs to the application. It changes no counts and no state.
	Neutral
	// Rejected says the broker is healthy and refused this message for a reason of
	// the message's own (too large, malformed): another message may well go through.
	// A circuit treats it as Neutral; the outbox charges the row an attempt.
	Rejected
	// Unusable says the broker is healthy but the destination cannot take any
	// message: it is missing, forbidden to these credentials, or misconfigured.
	// Every message to it fails until someone fixes it, and nothing about the
	// message is wrong. A circuit treats it as Neutral (opening would not help, and
	// the broker answers); the outbox holds the destination without spending
	// attempts, and the registry reports it (Snapshot.Unusable).
	Unusable
)

// String returns "success", "failure", "neutral", "rejected" or "unusable".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Neutral, 0:
		return "neutral"
	case Rejected:
		return "rejected"
	case Unusable:
		return "unusable"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Scope says who shares a circuit's state.
type Scope uint8

// The scopes a circuit can protect. A backend refuses a scope it cannot provide.
const (
	// LocalProcess keeps the state in this process; every replica has its own.
	LocalProcess Scope = iota
	// SharedDependency keeps one state for every replica that protects the same
	// dependency (see package breaker/dynamo).
	SharedDependency
	// SingleHost shares one state between the cooperating processes of one host.
	SingleHost
)

// String returns "LOCAL_PROCESS", "SHARED_DEPENDENCY" or "SINGLE_HOST".
func (s Scope) String() string {
	switch s {
	case LocalProcess:
		return "LOCAL_PROCESS"
	case SharedDependency:
		return "SHARED_DEPENDENCY"
	case SingleHost:
		return "SINGLE_HOST"
	}
	return "Scope(" + strconv.Itoa(int(s)) + ")"
}

// Override is an operator's hold on a circuit, set by ForceOpen or ForceClose.
type Override uint8

// The overrides a circuit can carry.
const (
	// NoOverride leaves the circuit to its state machine.
	NoOverride Override = iota
	// ForcedOpen rejects every call until the override's deadline.
	ForcedOpen
	// ForcedClosed admits every call until the override's deadline; outcomes are ignored.
	ForcedClosed
)

// String returns "none", "forced-open" or "forced-closed".
func (o Override) String() string {
	switch o {
	case NoOverride:
		return "none"
	case ForcedOpen:
		return "forced-open"
	case ForcedClosed:
		return "forced-closed"
	}
	return "Override(" + strconv.Itoa(int(o)) + ")"
}

// Mode says what a circuit does with a call it would refuse. It lets a team adopt a
// breaker on a live publisher in steps: watch it (Shadow), keep a destination flowing
// with an audit trail (FailOpen), then enforce.
type Mode uint8

// The modes of a circuit.
const (
	// Enforce refuses the call: the default.
	Enforce Mode = iota
	// Shadow admits the call, counts it as would-reject and reports it to the bypass
	// hook. The state machine runs as under Enforce: outcomes of calls Enforce would
	// have refused are ignored, so Shadow shows what Enforce would have done.
	Shadow
	// FailOpen admits a call refused by an open or half-open circuit as a bypass
	// (Permit.Bypass), counts it and reports it to the bypass hook, never silently.
	// MaxInFlight is still enforced. While half-open, the outcomes of bypassed calls
	// count as probe evidence, so the circuit recovers as traffic succeeds.
	FailOpen
)

// String returns "enforce", "shadow" or "fail-open".
func (m Mode) String() string {
	switch m {
	case Enforce:
		return "enforce"
	case Shadow:
		return "shadow"
	case FailOpen:
		return "fail-open"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}
