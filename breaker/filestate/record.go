package filestate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// recordFormat is the only layout this package reads and writes. A change of layout
// gets a new number, so an older reader refuses a newer file instead of guessing.
// Format 1 (before the shared engine) is refused as corrupt; Store.Clear discards it.
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
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r fileRecord
	if err := dec.Decode(&r); errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, corrupt("truncated (%v)", err)
	} else if err != nil {
		return nil, corrupt("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, corrupt("data after the record")
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
	return &r, nil
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
