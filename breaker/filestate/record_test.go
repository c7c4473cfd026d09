package filestate

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

const halfOpen = `{"format":2,"identity":"kafka:orders","version":12,"fingerprint":"61d8ae20ac4ba3828c6555b7a29fa9d4",` +
	`"state":2,"generation":9,"failures":3,"failed_probes":1,` +
	`"leases":[{"id":1,"owner":"a","expires":100},{"id":2,"owner":"b","expires":200}]}`

func TestDecodeRecordChecksEveryField(t *testing.T) {
	r, err := decodeRecord([]byte(halfOpen))
	if err != nil {
		t.Fatalf("valid half-open record: %v", err)
	}
	if r.State != breaker.HalfOpen || len(r.Leases) != 2 || r.Version != 12 {
		t.Fatalf("decoded %+v", r)
	}
	for _, tt := range []struct{ name, from, to, want string }{
		{"format", `"format":2`, `"format":1`, "format 1"},
		{"unknown field", `"failures":3`, `"failures":3,"probes":[]`, "unknown field"},
		{"duplicate lease", `"id":2`, `"id":1`, "Leases[1].ID"},
		{"leases while closed", `"state":2`, `"state":0`, "Leases"},
		{"zero generation", `"generation":9`, `"generation":0`, "Generation"},
		{"identity", `"kafka:orders"`, `"9kafka"`, "identity"},
		{"truncated", `}]}`, `}]`, "truncated"},
	} {
		_, err := decodeRecord([]byte(strings.Replace(halfOpen, tt.from, tt.to, 1)))
		if !errors.Is(err, ErrCorrupt) || !errors.Is(err, sharedstate.ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want a corrupt-record error mentioning %q", tt.name, err, tt.want)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r, err := decodeRecord([]byte(halfOpen))
	if err != nil {
		t.Fatal(err)
	}
	again, err := decodeRecord(r.encode())
	if err != nil || !reflect.DeepEqual(again, r) {
		t.Fatalf("round trip: %+v, %v; want %+v", again, err, r)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(halfOpen))
	f.Add([]byte(`{"format":2}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		again, err := decodeRecord(r.encode())
		if err != nil || !reflect.DeepEqual(sameLists(again), sameLists(r)) {
			t.Fatalf("re-encoding a decoded record: %+v, %v; want %+v", again, err, r)
		}
	})
}

// sameLists returns r with an empty lease list made absent: the encoding leaves out
// an empty list, so `"leases":[]` and no "leases" are the same record.
func sameLists(r *fileRecord) *fileRecord {
	if r == nil || len(r.Leases) > 0 {
		return r
	}
	c := *r
	c.Leases = nil
	return &c
}

// A record of the layout before the shared engine is read, not refused: an upgrade
// keeps every circuit's state, and the next write stores format 2.
func TestFormat1IsRead(t *testing.T) {
	const old = `{"version":1,"identity":"kafka:orders","fingerprint":"61d8ae20ac4ba3828c6555b7a29fa9d4",` +
		`"state":"half-open","generation":9,"failures":3,"open_until":0,"failed_probes":1,"successes":0,` +
		`"probes":[{"lease":1,"expires":100},{"lease":2,"expires":200}],"next_lease":3}`
	r, err := decodeRecord([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	want := sharedstate.Record{Version: 1, Fingerprint: "61d8ae20ac4ba3828c6555b7a29fa9d4", State: breaker.HalfOpen, Generation: 9,
		Failures: 3, FailedProbes: 1, Leases: []sharedstate.Lease{{ID: 1, Expires: 100}, {ID: 2, Expires: 200}}}
	if !reflect.DeepEqual(r.Record, want) || r.Format != recordFormat {
		t.Fatalf("format 1 read as %+v; want %+v", r, want)
	}
	if _, err := decodeRecord([]byte(strings.Replace(old, `"half-open"`, `"ajar"`, 1))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("format 1 with an unknown state: %v; want ErrCorrupt", err)
	}
}
