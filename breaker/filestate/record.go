package filestate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/brokerguard/brokerguard/breaker"
)

// recordVersion is the only layout this package reads and writes. A change of layout
// gets a new number, so an older reader refuses a newer file instead of guessing.
const recordVersion = 1

// maxRecordSize bounds what is read from a state file; a real record is a few hundred
// bytes, so anything larger is corrupt.
const maxRecordSize = 64 << 10

// maxStoredProbes bounds the probe list before the policy is known.
const maxStoredProbes = 1024

// State names as stored on disk; they match breaker.State.String.
const (
	stateClosed   = "closed"
	stateOpen     = "open"
	stateHalfOpen = "half-open"
)

// record is the JSON state of one circuit. Times are wall-clock Unix nanoseconds,
// since the processes sharing the file share nothing else that tells the time.
type record struct {
	Version     int    `json:"version"`
	Identity    string `json:"identity"`
	Fingerprint string `json:"fingerprint"` // breaker.Policy.Fingerprint of the writers
	State       string `json:"state"`
	Generation  uint64 `json:"generation"` // advanced by every transition
	// Failures counts consecutive failures while closed, and keeps the count that
	// opened the circuit while it is open or half-open.
	Failures     int64        `json:"failures"`
	OpenUntil    int64        `json:"open_until"`    // open: when a probe may be admitted; else 0
	FailedProbes int          `json:"failed_probes"` // consecutive failed probes since the circuit last closed
	Successes    int          `json:"successes"`     // half-open: probe successes so far
	Probes       []probeLease `json:"probes"`        // half-open: probes in flight
	NextLease    uint64       `json:"next_lease"`    // the number the next probe lease gets
}

// probeLease is one half-open probe in flight.
type probeLease struct {
	Lease   uint64 `json:"lease"`
	Expires int64  `json:"expires"` // Unix nanoseconds; past it the slot is free and the probe stale
}

// ErrCorrupt is matched (errors.Is) by the error of a state file that is not a valid
// record: truncated, not JSON, an unknown field, an unsupported version, or a value out
// of range.
var ErrCorrupt = errors.New("filestate: corrupt state record")

// corruptError says what is wrong with a record; it matches ErrCorrupt.
type corruptError struct{ reason string }

func (e *corruptError) Error() string {
	return "corrupt record: " + e.reason + " (Store.Clear discards it)"
}
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

func corrupt(format string, args ...any) error {
	return &corruptError{reason: fmt.Sprintf(format, args...)}
}

// decodeRecord parses and checks a record without knowing which circuit or policy it
// belongs to. Every field is checked: a record either passes whole or is refused.
func decodeRecord(data []byte) (*record, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, corrupt("the file is empty")
	}
	if len(data) > maxRecordSize {
		return nil, corrupt("larger than %d bytes", maxRecordSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r record
	if err := dec.Decode(&r); errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, corrupt("truncated (%v)", err)
	} else if err != nil {
		return nil, corrupt("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, corrupt("data after the record")
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &r, nil
}

// check validates every field on its own and the fields against the state.
func (r *record) check() error {
	if r.Version != recordVersion {
		return corrupt("version %d, this build reads version %d", r.Version, recordVersion)
	}
	if err := validateIdentity(r.Identity); err != nil {
		return corrupt("identity: %v", err)
	}
	if !isFingerprint(r.Fingerprint) {
		return corrupt("fingerprint %q is not 32 lowercase hex digits", r.Fingerprint)
	}
	switch {
	case r.Generation == 0:
		return corrupt("generation must be positive")
	case r.Failures < 0:
		return corrupt("failures must not be negative (got %d)", r.Failures)
	case r.FailedProbes < 0:
		return corrupt("failed_probes must not be negative (got %d)", r.FailedProbes)
	case r.Successes < 0:
		return corrupt("successes must not be negative (got %d)", r.Successes)
	case r.NextLease == 0:
		return corrupt("next_lease must be positive")
	case r.OpenUntil < 0:
		return corrupt("open_until must not be negative (got %d)", r.OpenUntil)
	}
	switch r.State {
	case stateClosed, stateOpen:
		if len(r.Probes) != 0 || r.Successes != 0 {
			return corrupt("a %s record holds probes or probe successes", r.State)
		}
		if (r.State == stateOpen) != (r.OpenUntil > 0) {
			return corrupt("open_until must be set exactly when the state is open (state %s, open_until %d)", r.State, r.OpenUntil)
		}
	case stateHalfOpen:
		if r.OpenUntil != 0 {
			return corrupt("a half-open record has open_until %d", r.OpenUntil)
		}
		if len(r.Probes) > maxStoredProbes {
			return corrupt("%d probes, more than %d", len(r.Probes), maxStoredProbes)
		}
		for i, p := range r.Probes {
			if p.Lease == 0 || p.Lease >= r.NextLease {
				return corrupt("probe %d has lease %d outside [1, next_lease %d)", i, p.Lease, r.NextLease)
			}
			if p.Expires <= 0 {
				return corrupt("probe %d has expiry %d", i, p.Expires)
			}
			for _, q := range r.Probes[:i] {
				if q.Lease == p.Lease {
					return corrupt("lease %d held twice", p.Lease)
				}
			}
		}
	default:
		return corrupt("unknown state %q", r.State)
	}
	return nil
}

// checkPolicy validates what only the policy can tell (p is normalized and its
// fingerprint matched the record's).
func (r *record) checkPolicy(p breaker.Policy) error {
	switch {
	case r.State == stateClosed && r.Failures > 0 && r.Failures >= int64(p.FailureThreshold):
		return corrupt("closed with %d failures, at or over the threshold %d", r.Failures, p.FailureThreshold)
	case r.State != stateClosed && !p.Enabled():
		return corrupt("%s, but the policy never opens", r.State)
	case len(r.Probes) > p.HalfOpenMaxProbes:
		return corrupt("%d probes in flight, more than HalfOpenMaxProbes %d", len(r.Probes), p.HalfOpenMaxProbes)
	case r.Successes >= p.SuccessesToClose:
		return corrupt("half-open with %d probe successes, enough to have closed (%d)", r.Successes, p.SuccessesToClose)
	}
	return nil
}

// encode returns the record as one line of JSON.
func (r *record) encode() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		// A record holds only strings, integers and a slice of them.
		panic("filestate: encoding a record: " + err.Error())
	}
	return append(b, '\n')
}

func isFingerprint(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (r *record) brokerState() breaker.State {
	switch r.State {
	case stateOpen:
		return breaker.Open
	case stateHalfOpen:
		return breaker.HalfOpen
	}
	return breaker.Closed
}

// The transitions. Each starts a new generation, which makes every permit of the
// previous one stale.

func (r *record) toOpen(until int64) {
	r.State, r.Generation, r.OpenUntil = stateOpen, r.Generation+1, max(until, 1)
	r.Probes, r.Successes = nil, 0
}

func (r *record) toHalfOpen() {
	r.State, r.Generation, r.OpenUntil = stateHalfOpen, r.Generation+1, 0
	r.Probes, r.Successes = nil, 0
}

func (r *record) toClosed() {
	r.State, r.Generation, r.OpenUntil = stateClosed, r.Generation+1, 0
	r.Probes, r.Successes, r.Failures, r.FailedProbes = nil, 0, 0, 0
}

// reclaim drops the probes whose lease has run out and reports whether it dropped any.
func (r *record) reclaim(now int64) bool {
	live := r.Probes[:0]
	for _, p := range r.Probes {
		if now < p.Expires {
			live = append(live, p)
		}
	}
	dropped := len(live) != len(r.Probes)
	r.Probes = live
	return dropped
}

// liveProbes counts the probes whose lease has not run out.
func (r *record) liveProbes(now int64) int {
	n := 0
	for _, p := range r.Probes {
		if now < p.Expires {
			n++
		}
	}
	return n
}
