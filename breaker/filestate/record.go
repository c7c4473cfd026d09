package filestate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// recordFormat is the layout this package writes. A change of layout gets a new
// number, so an older reader refuses a newer file instead of guessing. Format 1 (the
// layout before the shared engine, which said "version":1) is still read, so that an
// upgrade keeps the state of every circuit; the next write replaces it with format 2.
const recordFormat = 2

// maxRecordSize bounds what is read from a state file; a real record is a few hundred
// bytes, so anything larger is corrupt.
const maxRecordSize = 64 << 10

// fileRecord is the JSON of a state file: the engine's record, with the layout
// number and the identity it belongs to. Times are wall-clock Unix nanoseconds,
// since the processes sharing the file share nothing else that tells the time.
type fileRecord struct {
	Format   int    `json:"format"`
	Identity string `json:"identity"`
	sharedstate.Record
}

// ErrCorrupt is matched (errors.Is) by the error of a state file that is not a valid
// record: truncated, not JSON, an unknown field, an unsupported format, or a value out
// of range. It also matches sharedstate.ErrCorrupt.
var ErrCorrupt = errors.New("filestate: corrupt state record")

// corruptError says what is wrong with a record; it matches ErrCorrupt.
type corruptError struct{ reason string }

func (e *corruptError) Error() string {
	return "corrupt record: " + e.reason + " (Store.Clear discards it)"
}
func (e *corruptError) Is(target error) bool {
	return target == ErrCorrupt || target == sharedstate.ErrCorrupt
}

func corrupt(format string, args ...any) error {
	return &corruptError{reason: fmt.Sprintf(format, args...)}
}

// decodeRecord parses and checks a record without knowing which policy it belongs
// to. Every field is checked: a record either passes whole or is refused.
func decodeRecord(data []byte) (*fileRecord, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, corrupt("the file is empty")
	}
	if len(data) > maxRecordSize {
		return nil, corrupt("larger than %d bytes", maxRecordSize)
	}
	var head struct {
		Format  *int `json:"format"`
		Version int  `json:"version"`
	}
	r := &fileRecord{}
	if json.Unmarshal(data, &head) == nil && head.Format == nil && head.Version == 1 {
		var err error
		if r, err = decodeFormat1(data); err != nil {
			return nil, err
		}
	} else if err := decodeStrict(data, r); err != nil {
		return nil, err
	}
	if r.Format != recordFormat {
		return nil, corrupt("format %d, this build reads format %d", r.Format, recordFormat)
	}
	if err := validateIdentity(r.Identity); err != nil {
		return nil, corrupt("identity: %v", err)
	}
	if err := r.Check(r.Identity); err != nil {
		return nil, corrupt("%v", err)
	}
	return r, nil
}

// decodeStrict decodes data, one JSON object with no unknown field, into v.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt("truncated (%v)", err)
	} else if err != nil {
		return corrupt("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return corrupt("data after the record")
	}
	return nil
}

// decodeFormat1 reads a record of the layout before the shared engine (decodeRecord
// checks its values). It becomes version 1 of the engine's record; its fingerprint (breaker.Policy.Fingerprint) is
// one the engine accepts from records written before it.
func decodeFormat1(data []byte) (*fileRecord, error) {
	var old struct {
		Version      int    `json:"version"`
		Identity     string `json:"identity"`
		Fingerprint  string `json:"fingerprint"`
		State        string `json:"state"`
		Generation   uint64 `json:"generation"`
		Failures     int64  `json:"failures"`
		OpenUntil    int64  `json:"open_until"`
		FailedProbes int64  `json:"failed_probes"`
		Successes    int64  `json:"successes"`
		Probes       []struct {
			Lease   uint64 `json:"lease"`
			Expires int64  `json:"expires"`
		} `json:"probes"`
		NextLease uint64 `json:"next_lease"`
	}
	if err := decodeStrict(data, &old); err != nil {
		return nil, err
	}
	r := &fileRecord{Format: recordFormat, Identity: old.Identity, Record: sharedstate.Record{
		Version: 1, Fingerprint: old.Fingerprint, Generation: old.Generation, Failures: old.Failures,
		OpenUntil: old.OpenUntil, FailedProbes: old.FailedProbes, Successes: old.Successes,
	}}
	switch old.State {
	case "closed":
		r.State = breaker.Closed
	case "open":
		r.State = breaker.Open
	case "half-open":
		r.State = breaker.HalfOpen
	default:
		return nil, corrupt("unknown state %q", old.State)
	}
	for _, p := range old.Probes {
		r.Leases = append(r.Leases, sharedstate.Lease{ID: p.Lease, Expires: p.Expires})
	}
	return r, nil
}

// encode returns the record as one line of JSON.
func (r *fileRecord) encode() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		// A record holds only strings, integers and a slice of them.
		panic("filestate: encoding a record: " + err.Error())
	}
	return append(b, '\n')
}
