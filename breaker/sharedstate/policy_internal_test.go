package sharedstate

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

func TestPerProcessFieldsArePolicyFields(t *testing.T) {
	for name := range perProcess {
		if _, ok := reflect.TypeFor[breaker.Policy]().FieldByName(name); !ok {
			t.Errorf("perProcess names %q, which breaker.Policy does not have", name)
		}
	}
}

func TestFingerprintNamesEveryBehaviouralFieldAndOnlyThose(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, Scope: breaker.SharedDependency}
	base, _ := Fingerprint(p)
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		q := p
		f := reflect.ValueOf(&q).Elem().Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 7e9)
		case reflect.Float64:
			f.SetFloat(0.25)
		case reflect.Uint8:
			f.SetUint(f.Uint() + 1)
		case reflect.Bool:
			f.SetBool(!f.Bool())
		}
		fp, desc := Fingerprint(q)
		if perProcess[name] {
			if fp != base {
				t.Errorf("%s is per process but changes the fingerprint", name)
			}
			continue
		}
		if fp == base || !strings.Contains(desc, name+"=") {
			t.Errorf("changing %s leaves the fingerprint or its description (%q) alone", name, desc)
		}
		if err := mismatch("x", base, describe(p, false), fp, desc); len(err.Fields) == 0 || !strings.Contains(strings.Join(err.Fields, ";"), name) {
			t.Errorf("a mismatch in %s names %q", name, err.Fields)
		}
	}
}
