package dynamo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// Attribute names of a circuit's item (see the package documentation).
const (
	attrID            = "id"
	attrVersion       = "ver"
	attrFingerprint   = "fp"
	attrPolicy        = "policy"
	attrState         = "state"
	attrGeneration    = "gen"
	attrFailures      = "failures"
	attrOpenUntil     = "open_until"
	attrFailedProbes  = "failed_probes"
	attrSuccesses     = "successes"
	attrLeases        = "leases"
	attrLeaseID       = "lease"
	attrLeaseOwner    = "owner"
	attrLeaseExpires  = "expires"
	attrOverride      = "override"
	attrOverrideUntil = "override_until"
	attrReason        = "reason"
	attrSince         = "since"
	// The health fields: the last failure's text and when, when the outage began.
	attrLastError      = "last_error"
	attrLastErrorAt    = "last_error_at"
	attrUnhealthySince = "unhealthy_since"
)

// attrOf names the attribute that stores each Record field.
var attrOf = map[string]string{
	"Version": attrVersion, "Fingerprint": attrFingerprint, "Policy": attrPolicy, "State": attrState,
	"Generation": attrGeneration, "Failures": attrFailures, "OpenUntil": attrOpenUntil,
	"FailedProbes": attrFailedProbes, "Successes": attrSuccesses, "Leases": attrLeases,
	"Override": attrOverride, "OverrideUntil": attrOverrideUntil, "Reason": attrReason, "Since": attrSince,
	"LastError": attrLastError, "LastErrorAt": attrLastErrorAt, "UnhealthySince": attrUnhealthySince,
}

// ErrCorruptItem is matched (errors.Is) by every *ItemError.
var ErrCorruptItem = errors.New("dynamo: corrupt circuit item")

// ItemError reports a stored item that cannot be decoded: a missing attribute, one of
// the wrong type, or a value out of range. A circuit whose item is corrupt refuses
// calls (its Acquire returns an *UnavailableError wrapping this error) until the item
// is repaired or deleted.
type ItemError struct {
	Identity string // the circuit's identity (the item's key)
	Field    string // the attribute, e.g. "gen" or "leases[2].expires"
	Reason   string // what is wrong with it
}

// Error names the identity, the attribute and the problem.
func (e *ItemError) Error() string {
	return "dynamo: corrupt circuit item " + strconv.Quote(e.Identity) + ": attribute " + e.Field + " " + e.Reason
}

// Is reports whether target is ErrCorruptItem.
func (e *ItemError) Is(target error) bool { return target == ErrCorruptItem }

func parseState(s string) (breaker.State, bool) {
	switch s {
	case "closed":
		return breaker.Closed, true
	case "open":
		return breaker.Open, true
	case "half-open":
		return breaker.HalfOpen, true
	}
	return 0, false
}

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func unum(v uint64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatUint(v, 10)}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// encode returns the attributes PutItem stores for r under id. Optional attributes
// are left out at their zero value, so an override's end removes it.
func encode(id string, r sharedstate.Record) map[string]types.AttributeValue {
	leases := make([]types.AttributeValue, len(r.Leases))
	for i, l := range r.Leases {
		leases[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			attrLeaseID:      unum(l.ID),
			attrLeaseOwner:   str(l.Owner),
			attrLeaseExpires: num(l.Expires),
		}}
	}
	m := map[string]types.AttributeValue{
		attrID:           str(id),
		attrVersion:      unum(r.Version),
		attrFingerprint:  str(r.Fingerprint),
		attrState:        str(r.State.String()),
		attrGeneration:   unum(r.Generation),
		attrFailures:     num(r.Failures),
		attrOpenUntil:    num(r.OpenUntil),
		attrFailedProbes: num(r.FailedProbes),
		attrSuccesses:    num(r.Successes),
		attrLeases:       &types.AttributeValueMemberL{Value: leases},
	}
	if r.Policy != "" {
		m[attrPolicy] = str(r.Policy)
	}
	if r.Override != breaker.NoOverride {
		m[attrOverride] = str(r.Override.String())
		m[attrOverrideUntil] = num(r.OverrideUntil)
	}
	if r.Reason != "" {
		m[attrReason] = str(r.Reason)
		m[attrSince] = num(r.Since)
	}
	if r.LastError != "" {
		m[attrLastError] = str(r.LastError)
		m[attrLastErrorAt] = num(r.LastErrorAt)
	}
	if r.UnhealthySince != 0 {
		m[attrUnhealthySince] = num(r.UnhealthySince)
	}
	return m
}

// decoder reads attributes strictly and keeps the first problem it finds.
type decoder struct {
	identity string
	err      *ItemError
}

func (d *decoder) fail(field, format string, args ...any) {
	if d.err == nil {
		d.err = &ItemError{Identity: d.identity, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
}

func (d *decoder) get(m map[string]types.AttributeValue, field, name string) types.AttributeValue {
	v, ok := m[name]
	if !ok || v == nil {
		d.fail(field, "is missing")
		return nil
	}
	return v
}

func (d *decoder) str(m map[string]types.AttributeValue, field, name string) string {
	v := d.get(m, field, name)
	if v == nil {
		return ""
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok || s == nil {
		d.fail(field, "must be a string (S), got %s", typeName(v))
		return ""
	}
	return s.Value
}

func (d *decoder) int(m map[string]types.AttributeValue, field, name string) int64 {
	v := d.get(m, field, name)
	if v == nil {
		return 0
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok || n == nil {
		d.fail(field, "must be a number (N), got %s", typeName(v))
		return 0
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || i < 0 {
		d.fail(field, "must be a non-negative 64-bit integer, got %q", n.Value)
		return 0
	}
	return i
}

func (d *decoder) uint(m map[string]types.AttributeValue, field, name string) uint64 {
	v := d.get(m, field, name)
	if v == nil {
		return 0
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok || n == nil {
		d.fail(field, "must be a number (N), got %s", typeName(v))
		return 0
	}
	u, err := strconv.ParseUint(n.Value, 10, 64)
	if err != nil {
		d.fail(field, "must be an unsigned 64-bit integer, got %q", n.Value)
		return 0
	}
	return u
}

// typeName is DynamoDB's name of v's type: "S", "N", "BOOL", "M", ...
func typeName(v types.AttributeValue) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", v), "*types.AttributeValueMember")
}

// decodeItem reads a stored item strictly. identity is the key the caller asked for;
// an item stored under another key is refused as well. Attributes it does not know are
// ignored, so operators may tag items (a TTL attribute, for example). The engine
// checks the decoded record's values against each other.
func decodeItem(identity string, m map[string]types.AttributeValue) (sharedstate.Record, error) {
	d := &decoder{identity: identity}
	id := d.str(m, attrID, attrID)
	r := sharedstate.Record{
		Version:      d.uint(m, attrVersion, attrVersion),
		Fingerprint:  d.str(m, attrFingerprint, attrFingerprint),
		Generation:   d.uint(m, attrGeneration, attrGeneration),
		Failures:     d.int(m, attrFailures, attrFailures),
		OpenUntil:    d.int(m, attrOpenUntil, attrOpenUntil),
		FailedProbes: d.int(m, attrFailedProbes, attrFailedProbes),
		Successes:    d.int(m, attrSuccesses, attrSuccesses),
	}
	stateText := d.str(m, attrState, attrState)
	if d.err == nil {
		var ok bool
		if r.State, ok = parseState(stateText); !ok {
			d.fail(attrState, "is not a known state (closed, open, half-open): %q", stateText)
		}
	}
	if v := d.get(m, attrLeases, attrLeases); v != nil && d.err == nil {
		l, ok := v.(*types.AttributeValueMemberL)
		switch {
		case !ok || l == nil:
			d.fail(attrLeases, "must be a list (L), got %s", typeName(v))
		case len(l.Value) > sharedstate.MaxLeases:
			d.fail(attrLeases, "holds %d leases, more than %d", len(l.Value), sharedstate.MaxLeases)
		default:
			r.Leases = d.leases(l.Value)
		}
	}
	if _, ok := m[attrPolicy]; ok {
		r.Policy = d.str(m, attrPolicy, attrPolicy)
	}
	if _, ok := m[attrOverride]; ok && d.err == nil {
		text := d.str(m, attrOverride, attrOverride)
		switch text {
		case breaker.ForcedOpen.String():
			r.Override = breaker.ForcedOpen
		case breaker.ForcedClosed.String():
			r.Override = breaker.ForcedClosed
		default:
			d.fail(attrOverride, "is not a known override (forced-open, forced-closed): %q", text)
		}
		r.OverrideUntil = d.int(m, attrOverrideUntil, attrOverrideUntil)
	}
	if _, ok := m[attrReason]; ok {
		r.Reason = d.str(m, attrReason, attrReason)
		r.Since = d.int(m, attrSince, attrSince)
	}
	if _, ok := m[attrLastError]; ok {
		r.LastError = d.str(m, attrLastError, attrLastError)
		r.LastErrorAt = d.int(m, attrLastErrorAt, attrLastErrorAt)
	}
	if _, ok := m[attrUnhealthySince]; ok {
		r.UnhealthySince = d.int(m, attrUnhealthySince, attrUnhealthySince)
	}
	if d.err == nil && id != identity {
		d.fail(attrID, "is %q, not the identity asked for", id)
	}
	if d.err == nil {
		// Values that contradict each other are the engine's to find; name the
		// attribute rather than the record field.
		var re *sharedstate.RecordError
		if err := r.Check(identity); errors.As(err, &re) {
			field, rest, _ := strings.Cut(re.Field, ".")
			field = attrOf[strings.Split(field, "[")[0]] + strings.TrimPrefix(field, strings.Split(field, "[")[0])
			if rest != "" {
				field += "." + attrLeaseID
			}
			d.fail(field, "%s", re.Reason)
		}
	}
	if d.err != nil {
		return sharedstate.Record{}, d.err
	}
	return r, nil
}

func (d *decoder) leases(list []types.AttributeValue) []sharedstate.Lease {
	if len(list) == 0 {
		return nil
	}
	out := make([]sharedstate.Lease, 0, len(list))
	seen := make(map[uint64]bool, len(list))
	for i, v := range list {
		field := attrLeases + "[" + strconv.Itoa(i) + "]"
		m, ok := v.(*types.AttributeValueMemberM)
		if !ok || m == nil {
			d.fail(field, "must be a map (M), got %s", typeName(v))
			return nil
		}
		l := sharedstate.Lease{
			ID:      d.uint(m.Value, field+"."+attrLeaseID, attrLeaseID),
			Owner:   d.str(m.Value, field+"."+attrLeaseOwner, attrLeaseOwner),
			Expires: d.int(m.Value, field+"."+attrLeaseExpires, attrLeaseExpires),
		}
		if d.err != nil {
			return nil
		}
		if l.ID == 0 || seen[l.ID] {
			d.fail(field+"."+attrLeaseID, "must be a non-zero id unique in the item, got %d", l.ID)
			return nil
		}
		seen[l.ID] = true
		out = append(out, l)
	}
	return out
}
