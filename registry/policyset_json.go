package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A PolicySet's JSON is what people edit (a policy file, the admin API's body): keys
// are the Go field names, durations are written as Go spells them ("550ms", "1m0s"),
// and Mode and Scope by their names ("shadow", "SHARED_DEPENDENCY"). A field left out
// is zero, as in a Go literal: start from what `brokerguard policy show` prints, which
// writes every field. An unknown key is an error naming it, so that a typo does not
// silently leave a default in force.
//
//	{"Default": {"Circuit": {"FailureThreshold": 5, "BreakDuration": "550ms", ...}, ...},
//	 "Overrides": {"kafka:payments": {...}}}

var (
	durationType = reflect.TypeFor[time.Duration]()
	modeType     = reflect.TypeFor[breaker.Mode]()
	scopeType    = reflect.TypeFor[breaker.Scope]()
)

// policySetJSON is PolicySet's JSON shape.
type policySetJSON struct {
	Default   json.RawMessage            `json:"Default"`
	Overrides map[string]json.RawMessage `json:"Overrides,omitempty"`
}

// MarshalJSON writes the set as described in the package's policy file format.
func (s PolicySet) MarshalJSON() ([]byte, error) {
	out := struct {
		Default   any            `json:"Default"`
		Overrides map[string]any `json:"Overrides"`
	}{Default: encodePolicy(reflect.ValueOf(s.Default)), Overrides: map[string]any{}}
	for k, p := range s.Overrides {
		out.Overrides[k] = encodePolicy(reflect.ValueOf(p))
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads a set written as MarshalJSON writes it. Errors name the
// destination and the field. It does not validate the policies: PolicySet.Validate
// and ApplyPolicies do.
func (s *PolicySet) UnmarshalJSON(b []byte) error {
	var raw policySetJSON
	if err := strictUnmarshal(b, &raw); err != nil {
		return fmt.Errorf("registry: policy set: %w", err)
	}
	if raw.Default == nil {
		return fmt.Errorf("registry: policy set: Default is missing")
	}
	set := PolicySet{Overrides: map[string]Policy{}}
	if err := decodePolicy(raw.Default, reflect.ValueOf(&set.Default).Elem(), ""); err != nil {
		return fmt.Errorf("registry: policy set: Default: %w", err)
	}
	for k, r := range raw.Overrides {
		var p Policy
		if err := decodePolicy(r, reflect.ValueOf(&p).Elem(), ""); err != nil {
			return fmt.Errorf("registry: policy set: override %q: %w", k, err)
		}
		set.Overrides[k] = p
	}
	*s = set
	return nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func encodePolicy(v reflect.Value) any {
	switch v.Type() {
	case durationType:
		return time.Duration(v.Int()).String()
	case modeType, scopeType:
		return fmt.Sprint(v.Interface())
	}
	if v.Kind() != reflect.Struct {
		return v.Interface()
	}
	out := map[string]any{}
	for i := range v.NumField() {
		out[v.Type().Field(i).Name] = encodePolicy(v.Field(i))
	}
	return out
}

// decodePolicy reads b into v, a field of a policy named path.
func decodePolicy(b json.RawMessage, v reflect.Value, path string) error {
	switch v.Type() {
	case durationType:
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%s: want a duration such as \"550ms\"", path)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		v.SetInt(int64(d))
		return nil
	case modeType, scopeType:
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%s: want a name such as %q", path, fmt.Sprint(reflect.Zero(v.Type()).Interface()))
		}
		for n := range 8 { // more than either type has
			c := reflect.ValueOf(n).Convert(v.Type())
			if fmt.Sprint(c.Interface()) == s {
				v.Set(c)
				return nil
			}
		}
		return fmt.Errorf("%s: unknown value %q", path, s)
	}
	if v.Kind() != reflect.Struct {
		if err := json.Unmarshal(b, v.Addr().Interface()); err != nil {
			return fmt.Errorf("%s: want a %v", path, v.Type())
		}
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("%s: want an object", path)
	}
	for k, raw := range fields {
		f, ok := v.Type().FieldByName(k)
		if !ok || !f.IsExported() {
			return fmt.Errorf("%s: unknown field", join(path, k))
		}
		if err := decodePolicy(raw, v.FieldByIndex(f.Index), join(path, k)); err != nil {
			return err
		}
	}
	return nil
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}
