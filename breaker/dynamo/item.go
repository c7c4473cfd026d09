package dynamo

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/brokerguard/brokerguard/breaker"
)

// Attribute names of a circuit's item (see the package documentation).
const (
	attrID           = "id"
	attrVersion      = "ver"
	attrFingerprint  = "fp"
	attrState        = "state"
	attrGeneration   = "gen"
	attrFailures     = "failures"
	attrOpenUntil    = "open_until"
	attrFailedProbes = "failed_probes"
	attrSuccesses    = "successes"
	attrLeases       = "leases"
	attrLeaseID      = "lease"
	attrLeaseOwner   = "owner"
	attrLeaseExpires = "expires"
)

// maxLeases bounds the leases a decoded item may hold, so that a corrupted item cannot
// make a replica walk a huge list on every probe decision.
const maxLeases = 1024

// item is the decoded state of one circuit, as stored in its table row. Times are
// Unix nanoseconds of the writers' clocks.
type item struct {
	id           string
	version      uint64 // advanced by every write; 0 only for an item not stored yet
	fingerprint  string
	state        breaker.State
	gen          uint64
	failures     int64 // closed: consecutive failures; otherwise the evidence that opened it
	openUntil    int64 // open: the deadline after which a probe may be admitted
	failedProbes int64 // consecutive failed probes since the circuit last closed
	successes    int64 // half-open: probe successes of this generation
	leases       []lease
}

// lease is one probe in flight while the circuit is half-open.
type lease struct {
	id      uint64 // the permit's PermitInfo.Lease
	owner   string // the replica that took it
	expires int64  // after this the slot may be taken over
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

func stateName(s breaker.State) string { return s.String() }

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

// encode returns the attributes PutItem stores for it.
func (it item) encode() map[string]types.AttributeValue {
	leases := make([]types.AttributeValue, len(it.leases))
	for i, l := range it.leases {
		leases[i] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			attrLeaseID:      unum(l.id),
			attrLeaseOwner:   str(l.owner),
			attrLeaseExpires: num(l.expires),
		}}
	}
	return map[string]types.AttributeValue{
		attrID:           str(it.id),
		attrVersion:      unum(it.version),
		attrFingerprint:  str(it.fingerprint),
		attrState:        str(stateName(it.state)),
		attrGeneration:   unum(it.gen),
		attrFailures:     num(it.failures),
		attrOpenUntil:    num(it.openUntil),
		attrFailedProbes: num(it.failedProbes),
		attrSuccesses:    num(it.successes),
		attrLeases:       &types.AttributeValueMemberL{Value: leases},
	}
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

func typeName(v types.AttributeValue) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return "S"
	case *types.AttributeValueMemberN:
		return "N"
	case *types.AttributeValueMemberB:
		return "B"
	case *types.AttributeValueMemberBOOL:
		return "BOOL"
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberL:
		return "L"
	case *types.AttributeValueMemberM:
		return "M"
	case *types.AttributeValueMemberSS:
		return "SS"
	case *types.AttributeValueMemberNS:
		return "NS"
	case *types.AttributeValueMemberBS:
		return "BS"
	}
	return fmt.Sprintf("%T", v)
}

// decodeItem reads a stored item strictly. identity is the key the caller asked for;
// an item stored under another key is refused as well. Attributes it does not know are
// ignored, so operators may tag items (a TTL attribute, for example).
func decodeItem(identity string, m map[string]types.AttributeValue) (item, error) {
	d := &decoder{identity: identity}
	it := item{
		id:           d.str(m, attrID, attrID),
		version:      d.uint(m, attrVersion, attrVersion),
		fingerprint:  d.str(m, attrFingerprint, attrFingerprint),
		gen:          d.uint(m, attrGeneration, attrGeneration),
		failures:     d.int(m, attrFailures, attrFailures),
		openUntil:    d.int(m, attrOpenUntil, attrOpenUntil),
		failedProbes: d.int(m, attrFailedProbes, attrFailedProbes),
		successes:    d.int(m, attrSuccesses, attrSuccesses),
	}
	stateText := d.str(m, attrState, attrState)
	if d.err == nil {
		var ok bool
		if it.state, ok = parseState(stateText); !ok {
			d.fail(attrState, "is not a known state (closed, open, half-open): %q", stateText)
		}
	}
	if v := d.get(m, attrLeases, attrLeases); v != nil && d.err == nil {
		l, ok := v.(*types.AttributeValueMemberL)
		switch {
		case !ok || l == nil:
			d.fail(attrLeases, "must be a list (L), got %s", typeName(v))
		case len(l.Value) > maxLeases:
			d.fail(attrLeases, "holds %d leases, more than %d", len(l.Value), maxLeases)
		default:
			it.leases = d.leases(l.Value)
		}
	}
	if d.err == nil {
		switch {
		case it.id != identity:
			d.fail(attrID, "is %q, not the identity asked for", it.id)
		case it.version == 0:
			d.fail(attrVersion, "must be at least 1")
		case it.fingerprint == "":
			d.fail(attrFingerprint, "must not be empty")
		case it.gen == 0:
			d.fail(attrGeneration, "must be at least 1")
		case it.state == breaker.Open && it.openUntil == 0:
			d.fail(attrOpenUntil, "must be set while the circuit is open")
		case it.state != breaker.HalfOpen && len(it.leases) > 0:
			d.fail(attrLeases, "must be empty while the circuit is %v", it.state)
		}
	}
	if d.err != nil {
		return item{}, d.err
	}
	return it, nil
}

func (d *decoder) leases(list []types.AttributeValue) []lease {
	if len(list) == 0 {
		return nil
	}
	out := make([]lease, 0, len(list))
	seen := make(map[uint64]bool, len(list))
	for i, v := range list {
		field := attrLeases + "[" + strconv.Itoa(i) + "]"
		m, ok := v.(*types.AttributeValueMemberM)
		if !ok || m == nil {
			d.fail(field, "must be a map (M), got %s", typeName(v))
			return nil
		}
		l := lease{
			id:      d.uint(m.Value, field+"."+attrLeaseID, attrLeaseID),
			owner:   d.str(m.Value, field+"."+attrLeaseOwner, attrLeaseOwner),
			expires: d.int(m.Value, field+"."+attrLeaseExpires, attrLeaseExpires),
		}
		if d.err != nil {
			return nil
		}
		if l.id == 0 || seen[l.id] {
			d.fail(field+"."+attrLeaseID, "must be a non-zero id unique in the item, got %d", l.id)
			return nil
		}
		seen[l.id] = true
		out = append(out, l)
	}
	return out
}
