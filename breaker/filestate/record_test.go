package filestate

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const halfOpen = `{"version":1,"identity":"kafka:orders","fingerprint":"61d8ae20ac4ba3828c6555b7a29fa9d4",` +
	`"state":"half-open","generation":9,"failures":3,"open_until":0,"failed_probes":1,"successes":0,` +
	`"probes":[{"lease":1,"expires":100},{"lease":2,"expires":200}],"next_lease":3}`

func TestDecodeRecordChecksHalfOpenFields(t *testing.T) {
	r, err := decodeRecord([]byte(halfOpen))
	if err != nil {
		t.Fatalf("valid half-open record: %v", err)
	}
	if r.State != stateHalfOpen || len(r.Probes) != 2 || r.NextLease != 3 {
		t.Fatalf("decoded %+v", r)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"lease held twice", `"lease":2`, `"lease":1`},
		{"lease not yet issued", `"lease":2`, `"lease":3`},
		{"lease zero", `"lease":1,`, `"lease":0,`},
		{"no expiry", `"expires":100`, `"expires":0`},
		{"open deadline while half-open", `"open_until":0`, `"open_until":5`},
		{"generation zero", `"generation":9`, `"generation":0`},
		{"next lease zero", `"next_lease":3`, `"next_lease":0`},
		{"negative successes", `"successes":0`, `"successes":-1`},
		{"negative failed probes", `"failed_probes":1`, `"failed_probes":-1`},
		{"probes while closed", `"state":"half-open"`, `"state":"closed"`},
		{"identity not valid", `"identity":"kafka:orders"`, `"identity":"../x"`},
		{"fingerprint in capitals", `"fingerprint":"61d8`, `"fingerprint":"61D8`},
		{"trailing garbage", `"next_lease":3}`, `"next_lease":3} x`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(halfOpen, tc.old) {
				t.Fatalf("fixture lacks %s", tc.old)
			}
			_, err := decodeRecord([]byte(strings.Replace(halfOpen, tc.old, tc.new, 1)))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode: %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r, err := decodeRecord([]byte(halfOpen))
	if err != nil {
		t.Fatal(err)
	}
	again, err := decodeRecord(r.encode())
	if err != nil || !reflect.DeepEqual(r, again) {
		t.Fatalf("round trip: %+v, %v; want %+v", again, err, r)
	}
}

// FuzzDecodeRecord: decoding never panics, and whatever it accepts passes the checks
// and survives an encode/decode round trip unchanged.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(halfOpen))
	f.Add([]byte(`{"version":1,"identity":"a","fingerprint":"00000000000000000000000000000000","state":"open","generation":1,"failures":1,"open_until":1,"failed_probes":0,"successes":0,"probes":null,"next_lease":1}`))
	f.Add([]byte(halfOpen[:60]))
	f.Add([]byte(`{"version":1,"VERSION":2}`))
	f.Add([]byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error %v does not match ErrCorrupt", err)
			}
			return
		}
		if err := r.check(); err != nil {
			t.Fatalf("accepted a record that fails its checks: %v", err)
		}
		again, err := decodeRecord(r.encode())
		if err != nil {
			t.Fatalf("re-decoding %s: %v", r.encode(), err)
		}
		if !reflect.DeepEqual(r, again) {
			t.Fatalf("round trip changed %+v into %+v", r, again)
		}
	})
}
