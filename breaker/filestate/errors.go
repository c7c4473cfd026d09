package filestate

import (
	"errors"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

var (
	// ErrInvalidIdentity is matched (errors.Is) by the error for an identity that is
	// not a valid circuit name (see Store.Circuit).
	ErrInvalidIdentity = errors.New("filestate: invalid identity")
	// ErrNotPrivate is matched by the error for a root directory, state file or lock
	// file that another user could read or write: it is group- or world-accessible,
	// owned by someone else, or not the kind of file expected.
	ErrNotPrivate = errors.New("filestate: state is not private")
	// ErrPolicyMismatch is matched by the refusal of a circuit whose stored policy
	// differs from the policy it is used with: a *sharedstate.PolicyMismatchError,
	// which names the fields that differ. To change the policy on purpose, drain the
	// calls in flight and call Store.Clear.
	ErrPolicyMismatch = sharedstate.ErrPolicyMismatch
)

// StateError reports a state or lock file that could not be used: it could not be
// opened, locked, read or written, is corrupt (errors.Is ErrCorrupt), or is not private
// (errors.Is ErrNotPrivate). It matches breaker.ErrUnavailable: a circuit that cannot
// read its state admits nothing.
type StateError struct {
	Identity string // the circuit
	Path     string // the file
	Op       string // what was being done: "open", "lock", "read", "write", "remove"
	Err      error  // what went wrong
}

// Error names the circuit, the file and the problem.
func (e *StateError) Error() string {
	return "filestate: circuit " + e.Identity + ": " + e.Op + " " + e.Path + ": " + e.Err.Error()
}

// Unwrap returns breaker.ErrUnavailable and the underlying error.
func (e *StateError) Unwrap() []error { return []error{breaker.ErrUnavailable, e.Err} }
