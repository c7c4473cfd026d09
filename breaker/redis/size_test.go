package redisstate_test

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// A key inflated by someone with write access to Redis is refused by its size, before
// any of it is decoded (issue 32: a 36 MiB record made each replica allocate 200 MiB
// and miss its deadline). The hash's other fields, and the write tokens every script
// reads, are bounded the same way.
func TestOversizedRecordsAreRefusedBeforeDecoding(t *testing.T) {
	d, client := testDriver(t)
	ctx := t.Context()
	// A valid record with far too many leases: about 2 MiB of JSON.
	huge := closedRecord(bigGen)
	huge.State = breaker.HalfOpen
	for i := range 30000 {
		huge.Leases = append(huge.Leases, sharedstate.Lease{ID: uint64(i + 1), Owner: "host/1/abc", Expires: 1 << 60})
	}
	raw, err := json.Marshal(huge)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, field, value string }{
		{"record", "record", string(raw)},
		{"fingerprint", "fingerprint", strings.Repeat("f", 2<<20)},
		{"write tokens", "ops", strings.Repeat("0", 2<<20)},
		{"unknown field", "padding", strings.Repeat("p", 2<<20)},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "kafka:big-" + c.field
			if err := d.Replace(ctx, id, 0, closedRecord(bigGen)); err != nil {
				t.Fatal(err)
			}
			if err := client.HSet(ctx, d.Key(id), c.field, c.value).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Del(ctx, d.Key(id)) })
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := d.Load(ctx, id)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			if c.field == "padding" || c.field == "ops" {
				// A field the driver does not read (or bounds in the script) costs it nothing.
				r, err := d.Load(ctx, id)
				if err != nil {
					t.Fatalf("Load with a large %s field: %v", c.field, err)
				}
				next := r
				next.Version, next.Failures = r.Version+1, 1
				if err := d.Replace(ctx, id, r.Version, next); err != nil {
					t.Fatalf("Replace with a large %s field: %v", c.field, err)
				}
			} else {
				var re *redisstate.RecordError
				if !errors.As(err, &re) || !errors.Is(err, sharedstate.ErrCorrupt) || re.Field != c.field ||
					!strings.Contains(re.Reason, "bytes") {
					t.Fatalf("Load of a key with a %d-byte %s: %v; want a *RecordError naming the field's size", len(c.value), c.field, err)
				}
			}
			if allocated > 1<<20 {
				t.Fatalf("Load allocated %d bytes for a %d-byte field; want it refused before reading", allocated, len(c.value))
			}
		})
	}
}
