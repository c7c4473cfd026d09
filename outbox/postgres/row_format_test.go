package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// Rows are written as schema.sql documents them for other programs that read the
// table: msg_key NULL for no key, headers NULL for none (nil or empty), else a JSON
// array of {"key", "value" in base64}; a nil payload is an empty one.
func TestRowsAreWrittenInTheDocumentedFormat(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx := context.Background()
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	var ids []int64
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		ids, err = s.Enqueue(ctx, postgres.Pgx(tx),
			outbox.Entry{Destination: d},
			outbox.Entry{Destination: d, Message: transport.Message{Key: []byte("k"), Value: []byte("v"), Headers: []transport.Header{}}},
			outbox.Entry{Destination: d, Message: transport.Message{Headers: []transport.Header{{Key: "trace", Value: []byte("ab")}}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		keyNull bool
		payload string
		headers *string // nil: NULL
	}{
		{true, "", nil},
		{false, "v", nil},
		{true, "", mpPtr(`[{"key": "trace", "value": "YWI="}]`)},
	} {
		var (
			keyNull bool
			payload []byte
			headers *string
		)
		if err := pool.QueryRow(ctx, "SELECT msg_key IS NULL, payload, headers::text FROM "+postgres.Table+" WHERE id = $1", ids[i]).
			Scan(&keyNull, &payload, &headers); err != nil {
			t.Fatal(err)
		}
		if keyNull != want.keyNull || string(payload) != want.payload || (headers == nil) != (want.headers == nil) ||
			headers != nil && *headers != *want.headers {
			t.Errorf("row %d: key NULL %v, payload %q, headers %v; want %v, %q, %v", i, keyNull, payload, mpStr(headers), want.keyNull, want.payload, mpStr(want.headers))
		}
	}
}

func mpPtr(s string) *string { return &s }

func mpStr(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
