package integration

import (
	"bufio"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gopkg.in/yaml.v3"

	"github.com/brokerguard/brokerguard/internal/harness"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Ports       []string          `yaml:"ports"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=value", path, line)
		}
		env[k] = v
	}
	return env
}

// portOf returns the host port an endpoint variable points at.
func portOf(t *testing.T, name, value string) string {
	t.Helper()
	if !strings.Contains(value, "://") {
		value = "tcp://" + value
	}
	u, err := url.Parse(value)
	if err != nil || u.Port() == "" {
		t.Fatalf("%s=%q has no port", name, value)
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" {
		t.Fatalf("%s=%q does not point at this machine", name, value)
	}
	return u.Port()
}

// TestComposeMatchesTestsAndReadme keeps docker-compose.yml, compose.env, the table of
// docs/contributing.md and the harness's defaults telling the same story; there is no
// Docker engine in CI to catch a mismatch any other way.
func TestComposeMatchesTestsAndReadme(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose composeFile
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	published := map[string]string{} // host port -> service
	for name, svc := range compose.Services {
		if svc.Image == "" {
			t.Errorf("service %s has no image", name)
		}
		if svc.Healthcheck == nil || len(svc.Healthcheck.Test) == 0 {
			t.Errorf("service %s has no health check (make up waits on them)", name)
		}
		for _, p := range svc.Ports {
			host, _, _ := strings.Cut(p, ":")
			published[host] = name
		}
	}
	for _, want := range []string{"kafka", "rabbitmq", "localstack", "postgres", "redis", "nats"} {
		if _, ok := compose.Services[want]; !ok {
			t.Errorf("docker-compose.yml lacks %s", want)
		}
	}
	if s := compose.Services["localstack"].Environment["SERVICES"]; !strings.Contains(s, "sqs") || !strings.Contains(s, "dynamodb") {
		t.Errorf("localstack SERVICES=%q, want sqs and dynamodb", s)
	}

	env := readEnvFile(t, "../compose.env")
	wantService := map[string]string{
		"KAFKA_BROKERS": "kafka", "AMQP_URL": "rabbitmq", "SQS_ENDPOINT": "localstack",
		"DYNAMODB_ENDPOINT": "localstack", "DATABASE_URL": "postgres", "REDIS_ADDR": "redis", "MYSQL_DSN": "mariadb",
		"NATS_URL": "nats",
	}
	readme, err := os.ReadFile("../docs/contributing.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, svc := range wantService {
		value, ok := env[name]
		if !ok {
			t.Errorf("compose.env does not set %s", name)
			continue
		}
		endpoint := value
		if name == "MYSQL_DSN" { // go-sql-driver/mysql's form, not a URL
			cfg, err := mysql.ParseDSN(value)
			if err != nil {
				t.Fatalf("MYSQL_DSN=%s: %v", value, err)
			}
			endpoint = cfg.Addr
		}
		if got := published[portOf(t, name, endpoint)]; got != svc {
			t.Errorf("%s=%s: port published by %q, want %q", name, value, got, svc)
		}
		row := "| `" + name + "` |"
		i := strings.Index(string(readme), row)
		if i < 0 {
			t.Errorf("docs/contributing.md's table lacks %s", name)
			continue
		}
		line, _, _ := strings.Cut(string(readme[i:]), "\n")
		if !strings.Contains(line, "`"+value+"`") {
			t.Errorf("docs/contributing.md's row for %s does not show compose.env's value %s:\n%s", name, value, line)
		}
	}
	// The machine-local defaults are the compose values, so one set of tests fits both.
	if env["DATABASE_URL"] != harness.DefaultDatabaseURL || env["AMQP_URL"] != harness.DefaultAMQPURL ||
		env["REDIS_ADDR"] != harness.DefaultRedisAddr || env["NATS_URL"] != harness.DefaultNATSURL ||
		env["MYSQL_DSN"] != harness.DefaultMySQLDSN {
		t.Errorf("compose.env and the harness defaults disagree: %s / %s / %s / %s / %s vs %s / %s / %s / %s / %s",
			env["DATABASE_URL"], env["AMQP_URL"], env["REDIS_ADDR"], env["NATS_URL"], env["MYSQL_DSN"],
			harness.DefaultDatabaseURL, harness.DefaultAMQPURL, harness.DefaultRedisAddr, harness.DefaultNATSURL, harness.DefaultMySQLDSN)
	}
}
