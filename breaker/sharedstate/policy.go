package sharedstate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// perProcess names the Policy fields that each replica may set for itself: they do
// not change the shared state machine, so replicas that differ only there agree.
var perProcess = map[string]bool{
	"MaxInFlight": true, // bounds this process's calls in flight (the engine counts per process)
}

// describe returns the normalized policy as "Field=value" words in field order,
// leaving out zero values (so that a field added to breaker.Policy later changes no
// existing description) and, unless all is set, the per-process fields.
func describe(p breaker.Policy, all bool) string {
	v := reflect.ValueOf(backend.Normalize(p))
	var words []string
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() || !all && perProcess[f.Name] || v.Field(i).IsZero() {
			continue
		}
		words = append(words, fmt.Sprintf("%s=%v", f.Name, v.Field(i).Interface()))
	}
	return strings.Join(words, " ")
}

// Fingerprint returns the digest replicas compare before they share a record, and
// the description it digests ("FailureThreshold=3 BreakDuration=10s ..."), which is
// stored beside it so that a mismatch can name the fields that differ. Per-process
// fields (MaxInFlight) are left out.
func Fingerprint(p breaker.Policy) (digest, description string) {
	description = describe(p, false)
	sum := sha256.Sum256([]byte("brokerguard.shared.v2|" + description))
	return hex.EncodeToString(sum[:16]), description
}

// PolicyMismatchError is the refusal of a shared record written under another policy:
// replicas sharing a circuit must run one state machine. It names the fields that
// differ. errors.Is(err, ErrPolicyMismatch) holds for it.
type PolicyMismatchError struct {
	Identity string
	// Stored and Ours are the two fingerprints; Fields the differences, each as
	// "Field: stored <value>, ours <value>" (empty when the stored record predates
	// descriptions and only the digests can be compared).
	Stored, Ours string
	Fields       []string
}

// Error names the circuit and the fields that differ.
func (e *PolicyMismatchError) Error() string {
	what := "a different policy (fingerprint " + e.Stored + ", ours " + e.Ours + ")"
	if len(e.Fields) > 0 {
		what = "a different policy: " + strings.Join(e.Fields, "; ")
	}
	return "sharedstate: circuit " + fmt.Sprintf("%q", e.Identity) + " is shared under " + what +
		"; replicas sharing a circuit must use the same policy"
}

// Is reports whether target is ErrPolicyMismatch.
func (e *PolicyMismatchError) Is(target error) bool { return target == ErrPolicyMismatch }

// mismatch compares two descriptions field by field (a field absent from one is at
// its zero value there).
func mismatch(identity, storedDigest, storedDesc, ourDigest, ourDesc string) *PolicyMismatchError {
	e := &PolicyMismatchError{Identity: identity, Stored: storedDigest, Ours: ourDigest}
	if storedDesc == "" {
		return e
	}
	a, b := words(storedDesc), words(ourDesc)
	names := map[string]bool{}
	for k := range a {
		names[k] = true
	}
	for k := range b {
		names[k] = true
	}
	for k := range names {
		if a[k] != b[k] {
			e.Fields = append(e.Fields, k+": stored "+orZero(a[k])+", ours "+orZero(b[k]))
		}
	}
	sort.Strings(e.Fields)
	return e
}

func words(desc string) map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(desc) {
		k, v, _ := strings.Cut(w, "=")
		m[k] = v
	}
	return m
}

func orZero(v string) string {
	if v == "" {
		return "0 (unset)"
	}
	return v
}

// ComparePolicies returns nil when a and b are the same policy, per-process fields
// included, and otherwise a *PolicyMismatchError naming the fields that differ.
// Backends use it when one process asks twice for the same circuit.
func ComparePolicies(identity string, a, b breaker.Policy) error {
	da, db := describe(a, true), describe(b, true)
	if da == db {
		return nil
	}
	return mismatch(identity, backend.Fingerprint(a), da, backend.Fingerprint(b), db)
}
