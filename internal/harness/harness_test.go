package harness

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
)

// recordingTB captures what Require asks of a test instead of ending it.
type recordingTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

func (r *recordingTB) Skipf(format string, args ...any) { r.skip = fmt.Sprintf(format, args...) }

func TestRequire(t *testing.T) {
	down := &UnavailableError{
		Service: ServiceRabbitMQ, Addr: "127.0.0.1:1", Hint: rabbitHint,
		Err: errors.New("dial tcp 127.0.0.1:1:\nconnection refused"),
	}
	tests := []struct {
		name      string
		ci        string
		err       error
		wantFatal bool
		wantSkip  bool
		wantHint  string
	}{
		{name: "nil error under CI", ci: "true", err: nil},
		{name: "nil error locally", ci: "", err: nil},
		{name: "CI=true fails", ci: "true", err: down, wantFatal: true},
		{name: "CI=1 fails", ci: "1", err: down, wantFatal: true},
		{name: "CI unset skips with hint", ci: "", err: down, wantSkip: true, wantHint: rabbitHint},
		{name: "CI=false skips", ci: "false", err: down, wantSkip: true, wantHint: rabbitHint},
		{name: "plain error skips with generic hint", ci: "", err: errors.New("boom"), wantSkip: true, wantHint: "see scripts/services.sh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			rec := &recordingTB{TB: t}
			Require(rec, ServiceRabbitMQ, tt.err)
			if (rec.fatal != "") != tt.wantFatal || (rec.skip != "") != tt.wantSkip {
				t.Fatalf("fatal=%q skip=%q; want fatal %v, skip %v", rec.fatal, rec.skip, tt.wantFatal, tt.wantSkip)
			}
			msg := rec.fatal + rec.skip
			if tt.err == nil {
				return
			}
			if !strings.Contains(msg, ServiceRabbitMQ) || !strings.Contains(msg, oneLine(tt.err.Error())) {
				t.Errorf("message %q does not name the service and the error", msg)
			}
			if strings.ContainsRune(msg, '\n') {
				t.Errorf("message %q spans more than one line", msg)
			}
			if !strings.Contains(msg, tt.wantHint) {
				t.Errorf("message %q lacks hint %q", msg, tt.wantHint)
			}
		})
	}
}

func TestUnavailableErrorMatches(t *testing.T) {
	cause := errors.New("refused")
	err := fmt.Errorf("wrapped: %w", &UnavailableError{Service: serviceSQS, Err: cause})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, cause) {
		t.Fatalf("errors.Is(%v) misses ErrUnavailable or the cause", err)
	}
}

// listen returns the address of a loopback listener that lives as long as the test.
func listen(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// refused is a loopback address where nothing listens.
const refused = "127.0.0.1:1"

func TestEnvironment(t *testing.T) {
	up := listen(t)
	tests := []struct {
		name    string
		env     string
		value   string
		lookup  func() (string, error)
		want    string
		wantErr bool
	}{
		{name: "SQS unset", env: "SQS_ENDPOINT", value: "", lookup: SQS, want: ""},
		{name: "SQS set", env: "SQS_ENDPOINT", value: "http://" + up, lookup: SQS, want: "http://" + up},
		{name: "SQS down", env: "SQS_ENDPOINT", value: "http://" + refused, lookup: SQS, wantErr: true},
		{name: "SQS without port", env: "SQS_ENDPOINT", value: "ftp://localhost", lookup: SQS, wantErr: true},
		{name: "DynamoDB unset", env: "DYNAMODB_ENDPOINT", value: " ", lookup: DynamoDB, want: ""},
		{name: "DynamoDB set", env: "DYNAMODB_ENDPOINT", value: "http://" + up, lookup: DynamoDB, want: "http://" + up},
		{name: "DynamoDB down", env: "DYNAMODB_ENDPOINT", value: "http://" + refused, lookup: DynamoDB, wantErr: true},
		{name: "AMQP set", env: "AMQP_URL", value: "amqp://u:p@" + up + "/vh", lookup: RabbitMQ, want: "amqp://u:p@" + up + "/vh"},
		{name: "AMQP down is not started", env: "AMQP_URL", value: "amqp://u:p@" + refused + "/", lookup: RabbitMQ, wantErr: true},
		{name: "Postgres URL set", env: "DATABASE_URL", value: "postgres://u@" + up + "/db", lookup: Postgres, want: "postgres://u@" + up + "/db"},
		{name: "Postgres keyword DSN set", env: "DATABASE_URL", value: "host=127.0.0.1 port=" + portOf(t, up) + " user=u", lookup: Postgres, want: "host=127.0.0.1 port=" + portOf(t, up) + " user=u"},
		{name: "Postgres down is not started", env: "DATABASE_URL", value: "postgres://u@" + refused + "/db", lookup: Postgres, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(tt.env, tt.value)
			got, err := tt.lookup()
			if tt.wantErr {
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("got %q, %v; want an error matching ErrUnavailable", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func TestKafkaEnvironment(t *testing.T) {
	a, b := listen(t), listen(t)
	t.Setenv("KAFKA_BROKERS", " "+a+" ,"+b+",")
	got, err := Kafka()
	if err != nil || len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("Kafka() = %q, %v; want [%s %s]", got, err, a, b)
	}
	t.Setenv("KAFKA_BROKERS", a+","+refused)
	var ue *UnavailableError
	if _, err := Kafka(); !errors.As(err, &ue) || ue.Addr != refused || ue.Service != serviceKafka {
		t.Fatalf("Kafka() with a dead broker: %v; want an UnavailableError for %s", err, refused)
	}
	t.Setenv("KAFKA_BROKERS", "")
	if got, err := Kafka(); got != nil || err != nil {
		t.Fatalf("Kafka() unset = %q, %v; want nil, nil", got, err)
	}
}

func TestSchemaName(t *testing.T) {
	long := strings.Repeat("Abc/", 30)
	a, b := schemaName(long), schemaName(long)
	if a == b {
		t.Fatalf("two calls gave the same name %q", a)
	}
	if len(a) > 63 || !strings.HasPrefix(a, "t_abc_abc") || strings.Trim(a, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		t.Fatalf("schemaName(%q) = %q; want a lower-case identifier of at most 63 bytes", long, a)
	}
}

func TestWithSearchPath(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{DefaultDatabaseURL, "postgres://postgres@127.0.0.1:5432/test?search_path=s1&sslmode=disable"},
		{"postgresql://u@h/db", "postgresql://u@h/db?search_path=s1"},
		{"host=h user=u", "host=h user=u search_path=s1"},
	}
	for _, tt := range tests {
		if got := withSearchPath(tt.dsn, "s1"); got != tt.want {
			t.Errorf("withSearchPath(%q) = %q; want %q", tt.dsn, got, tt.want)
		}
	}
}
