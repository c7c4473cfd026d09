package dynamo

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

func sampleItems() []sharedstate.Record {
	fp := testFingerprint()
	return []sharedstate.Record{
		{Version: 1, Fingerprint: fp, State: breaker.Closed, Generation: 1},
		{Version: 7, Fingerprint: fp, State: breaker.Closed, Generation: 3, Failures: 2, FailedProbes: 0},
		{Version: 9, Fingerprint: fp, State: breaker.Open, Generation: 4, Failures: 3, OpenUntil: 1 << 62, FailedProbes: 2},
		{Version: 12, Fingerprint: fp, State: breaker.HalfOpen, Generation: 5, Failures: 3, OpenUntil: 17, Successes: 1,
			Leases: []sharedstate.Lease{{ID: 1<<63 - 1, Owner: "a", Expires: 99}, {ID: 5, Owner: "", Expires: 0}}},
	}
}

func TestItemRoundTrip(t *testing.T) {
	for _, want := range sampleItems() {
		got, err := decodeItem(testID, encode(testID, want))
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", want, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip = %+v; want %+v", got, want)
		}
	}
}

func TestDecodeIgnoresUnknownAttributes(t *testing.T) {
	want := sampleItems()[1]
	attrs := encode(testID, want)
	attrs["ttl"] = num(1234)
	if got, err := decodeItem(testID, attrs); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decode with an extra attribute = %+v, %v; want %+v", got, err, want)
	}
}

func TestDecodeItemNamesTheBadAttribute(t *testing.T) {
	halfOpen := sampleItems()[3]
	type edit func(map[string]types.AttributeValue)
	leaseList := func(m map[string]types.AttributeValue) []types.AttributeValue {
		return m[attrLeases].(*types.AttributeValueMemberL).Value
	}
	tests := []struct {
		name  string
		edit  edit
		field string
	}{
		{"version as a string", func(m map[string]types.AttributeValue) { m[attrVersion] = str("1") }, attrVersion},
		{"version zero", func(m map[string]types.AttributeValue) { m[attrVersion] = num(0) }, attrVersion},
		{"version fraction", func(m map[string]types.AttributeValue) {
			m[attrVersion] = &types.AttributeValueMemberN{Value: "1.5"}
		}, attrVersion},
		{"version overflow", func(m map[string]types.AttributeValue) {
			m[attrVersion] = &types.AttributeValueMemberN{Value: "99999999999999999999"}
		}, attrVersion},
		{"generation zero", func(m map[string]types.AttributeValue) { m[attrGeneration] = num(0) }, attrGeneration},
		{"state as a number", func(m map[string]types.AttributeValue) { m[attrState] = num(1) }, attrState},
		{"unknown state", func(m map[string]types.AttributeValue) { m[attrState] = str("HALF_OPEN") }, attrState},
		{"empty fingerprint", func(m map[string]types.AttributeValue) { m[attrFingerprint] = str("") }, attrFingerprint},
		{"another key", func(m map[string]types.AttributeValue) { m[attrID] = str("sqs:other") }, attrID},
		{"null failures", func(m map[string]types.AttributeValue) {
			m[attrFailures] = &types.AttributeValueMemberNULL{Value: true}
		}, attrFailures},
		{"negative open deadline", func(m map[string]types.AttributeValue) { m[attrOpenUntil] = num(-5) }, attrOpenUntil},
		{"leases as a map", func(m map[string]types.AttributeValue) {
			m[attrLeases] = &types.AttributeValueMemberM{}
		}, attrLeases},
		{"lease without owner", func(m map[string]types.AttributeValue) {
			delete(leaseList(m)[1].(*types.AttributeValueMemberM).Value, attrLeaseOwner)
		}, "leases[1].owner"},
		{"lease expiry as a string", func(m map[string]types.AttributeValue) {
			leaseList(m)[0].(*types.AttributeValueMemberM).Value[attrLeaseExpires] = str("soon")
		}, "leases[0].expires"},
		{"duplicate lease", func(m map[string]types.AttributeValue) {
			leaseList(m)[1].(*types.AttributeValueMemberM).Value[attrLeaseID] = unum(1<<63 - 1)
		}, "leases[1].lease"},
		{"lease id zero", func(m map[string]types.AttributeValue) {
			leaseList(m)[0].(*types.AttributeValueMemberM).Value[attrLeaseID] = num(0)
		}, "leases[0].lease"},
		{"too many leases", func(m map[string]types.AttributeValue) {
			m[attrLeases] = &types.AttributeValueMemberL{Value: make([]types.AttributeValue, sharedstate.MaxLeases+1)}
		}, attrLeases},
		{"leases while closed", func(m map[string]types.AttributeValue) { m[attrState] = str("closed") }, attrLeases},
		{"open without a deadline", func(m map[string]types.AttributeValue) {
			m[attrState] = str("open")
			m[attrOpenUntil] = num(0)
			m[attrLeases] = &types.AttributeValueMemberL{}
		}, attrOpenUntil},
	}
	for _, name := range []string{attrID, attrVersion, attrFingerprint, attrState, attrGeneration, attrFailures,
		attrOpenUntil, attrFailedProbes, attrSuccesses, attrLeases} {
		tests = append(tests, struct {
			name  string
			edit  edit
			field string
		}{"missing " + name, func(m map[string]types.AttributeValue) { delete(m, name) }, name})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			attrs := encode(testID, halfOpen)
			tt.edit(attrs)
			_, err := decodeItem(testID, attrs)
			var ie *ItemError
			if !errors.As(err, &ie) || !errors.Is(err, ErrCorruptItem) {
				t.Fatalf("decode = %v; want an *ItemError", err)
			}
			if ie.Field != tt.field || ie.Identity != testID {
				t.Fatalf("ItemError{Identity: %q, Field: %q}; want field %q", ie.Identity, ie.Field, tt.field)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "dynamo: ") || !strings.Contains(msg, tt.field) || !strings.Contains(msg, testID) {
				t.Fatalf("message %q does not name the identity and the field", msg)
			}
		})
	}
}

// attrsFromJSON reads DynamoDB's JSON form of an item ({"id": {"S": "x"}, ...}).
func attrsFromJSON(data []byte) (map[string]types.AttributeValue, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	out := make(map[string]types.AttributeValue, len(raw))
	for k, v := range raw {
		av, err := attrFromJSON(v)
		if err != nil {
			return nil, err
		}
		out[k] = av
	}
	return out, nil
}

func attrFromJSON(data json.RawMessage) (types.AttributeValue, error) {
	var typed map[string]json.RawMessage
	if err := json.Unmarshal(data, &typed); err != nil {
		return nil, err
	}
	if len(typed) != 1 {
		return nil, fmt.Errorf("want one type key, got %d", len(typed))
	}
	for kind, v := range typed {
		switch kind {
		case "S", "N":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, err
			}
			if kind == "S" {
				return &types.AttributeValueMemberS{Value: s}, nil
			}
			return &types.AttributeValueMemberN{Value: s}, nil
		case "BOOL", "NULL":
			var b bool
			if err := json.Unmarshal(v, &b); err != nil {
				return nil, err
			}
			if kind == "BOOL" {
				return &types.AttributeValueMemberBOOL{Value: b}, nil
			}
			return &types.AttributeValueMemberNULL{Value: b}, nil
		case "B":
			var b []byte
			if err := json.Unmarshal(v, &b); err != nil {
				return nil, err
			}
			return &types.AttributeValueMemberB{Value: b}, nil
		case "SS", "NS":
			var ss []string
			if err := json.Unmarshal(v, &ss); err != nil {
				return nil, err
			}
			if kind == "SS" {
				return &types.AttributeValueMemberSS{Value: ss}, nil
			}
			return &types.AttributeValueMemberNS{Value: ss}, nil
		case "L":
			var list []json.RawMessage
			if err := json.Unmarshal(v, &list); err != nil {
				return nil, err
			}
			l := &types.AttributeValueMemberL{Value: make([]types.AttributeValue, 0, len(list))}
			for _, e := range list {
				av, err := attrFromJSON(e)
				if err != nil {
					return nil, err
				}
				l.Value = append(l.Value, av)
			}
			return l, nil
		case "M":
			m, err := attrsFromJSON(v)
			if err != nil {
				return nil, err
			}
			return &types.AttributeValueMemberM{Value: m}, nil
		}
		return nil, fmt.Errorf("unknown type %q", kind)
	}
	panic("unreachable")
}

func FuzzDecodeItem(f *testing.F) {
	fp := testFingerprint()
	f.Add(`{"id":{"S":"kafka:orders"},"ver":{"N":"3"},"fp":{"S":"` + fp + `"},"state":{"S":"half-open"},"gen":{"N":"2"},` +
		`"failures":{"N":"3"},"open_until":{"N":"0"},"failed_probes":{"N":"1"},"successes":{"N":"0"},` +
		`"leases":{"L":[{"M":{"lease":{"N":"42"},"owner":{"S":"r1"},"expires":{"N":"1000"}}}]}}`)
	f.Add(`{"id":{"S":"kafka:orders"},"ver":{"N":"1"},"fp":{"S":"x"},"state":{"S":"open"},"gen":{"N":"1"},` +
		`"failures":{"N":"-1"},"open_until":{"N":"1e3"},"failed_probes":{"N":"0"},"successes":{"N":"0"},"leases":{"L":[]}}`)
	f.Add(`{"id":{"S":"kafka:orders"},"ver":{"NULL":true},"leases":{"L":[{"S":"x"},{"M":{}}]},"state":{"BOOL":true}}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, data string) {
		attrs, err := attrsFromJSON([]byte(data))
		if err != nil {
			t.Skip("not DynamoDB JSON")
		}
		it, err := decodeItem(testID, attrs)
		if err != nil {
			var ie *ItemError
			if !errors.As(err, &ie) || ie.Identity != testID || ie.Field == "" || ie.Reason == "" {
				t.Fatalf("decode error %v is not an *ItemError naming the identity and a field", err)
			}
			return
		}
		again, err := decodeItem(testID, encode(testID, it))
		if err != nil || !reflect.DeepEqual(again, it) {
			t.Fatalf("re-encoding a decoded item: %+v, %v; want %+v", again, err, it)
		}
		if attrs[attrID].(*types.AttributeValueMemberS).Value != testID {
			t.Fatal("decoded an item stored under another key")
		}
	})
}

// An attribute of the wrong type is reported with DynamoDB's name of the type found.
func TestTypeNameIsDynamoDBs(t *testing.T) {
	for _, tt := range []struct {
		v    types.AttributeValue
		want string
	}{
		{str("x"), "S"}, {num(1), "N"}, {&types.AttributeValueMemberBOOL{}, "BOOL"},
		{&types.AttributeValueMemberNULL{}, "NULL"}, {&types.AttributeValueMemberM{}, "M"},
		{&types.AttributeValueMemberL{}, "L"}, {&types.AttributeValueMemberSS{}, "SS"},
		{&types.AttributeValueMemberNS{}, "NS"}, {&types.AttributeValueMemberB{}, "B"}, {&types.AttributeValueMemberBS{}, "BS"},
	} {
		if got := typeName(tt.v); got != tt.want {
			t.Errorf("typeName(%T) = %q; want %q", tt.v, got, tt.want)
		}
	}
}
