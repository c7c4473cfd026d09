package redisstate

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// Whatever a key holds, decode returns a record or a *RecordError naming a field, and
// never panics; a record it returns agrees with the copies the scripts check.
func FuzzDecodeHash(f *testing.F) {
	good, _ := json.Marshal(sharedstate.Record{Version: 5, Fingerprint: "fp", State: breaker.Open, Generation: 9, OpenUntil: 1})
	f.Add(string(good), "5", "0", "open", "9", "fp", "none")
	f.Add("{", "x", "-1", "closed", "1", "", "none")
	f.Add(string(good), "05", "+0", "open", "9", "fp", "none")
	f.Add(`{"state":7,"leases":[{"id":1}]}`, "18446744073709551615", "3", "Closed(7)", "0", "", "Override(0)")
	d := &Driver{prefix: "p:"}
	f.Fuzz(func(t *testing.T, record, version, failures, state, generation, fingerprint, override string) {
		r, err := d.decode("id", []any{
			"record", record, "version", version, "failures", failures, "state", state,
			"generation", generation, "fingerprint", fingerprint, "override", override,
		})
		var re *RecordError
		switch {
		case err != nil && (!errors.As(err, &re) || re.Key != "p:{id}" || re.Field == ""):
			t.Fatalf("decode error %v; want a *RecordError naming the key and a field", err)
		case err == nil && (r.State.String() != state || strconv.FormatUint(r.Generation, 10) != generation ||
			r.Fingerprint != fingerprint || r.Override.String() != override ||
			strconv.FormatUint(r.Version, 10) != version || strconv.FormatInt(r.Failures, 10) != failures):
			t.Fatalf("decoded %+v from fields that disagree with it", r)
		}
	})
}
