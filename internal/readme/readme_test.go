// Package readme compiles every Go code block of the repository's README, so that the
// first code a user copies always builds.
package readme

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// knownImports maps a package name used in README snippets to its import path. A
// snippet without a package clause gets the imports whose names it uses.
var knownImports = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"log":        "log",
	"http":       "net/http",
	"sql":        "database/sql",
	"os":         "os",
	"time":       "time",
	"breaker":    "github.com/brokerguard/brokerguard/breaker",
	"registry":   "github.com/brokerguard/brokerguard/registry",
	"transport":  "github.com/brokerguard/brokerguard/transport",
	"kafka":      "github.com/brokerguard/brokerguard/kafka",
	"kafkago":    "github.com/segmentio/kafka-go",
	"amqp":       "github.com/brokerguard/brokerguard/amqp",
	"sqs":        "github.com/brokerguard/brokerguard/sqs",
	"awssqs":     "github.com/aws/aws-sdk-go-v2/service/sqs",
	"outbox":     "github.com/brokerguard/brokerguard/outbox",
	"postgres":   "github.com/brokerguard/brokerguard/outbox/postgres",
	"pgxpool":    "github.com/jackc/pgx/v5/pgxpool",
	"pgx":        "github.com/jackc/pgx/v5",
	"dynamo":     "github.com/brokerguard/brokerguard/breaker/dynamo",
	"dynamodb":   "github.com/aws/aws-sdk-go-v2/service/dynamodb",
	"telemetry":  "github.com/brokerguard/brokerguard/telemetry",
	"admin":      "github.com/brokerguard/brokerguard/admin",
	"otel":       "go.opentelemetry.io/otel",
	"metric":     "go.opentelemetry.io/otel/sdk/metric",
	"prometheus": "go.opentelemetry.io/otel/exporters/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
}

var fence = regexp.MustCompile("(?s)```go\n(.*?)```")

// asFile turns a README block into a compilable file of package pkg.
func asFile(block, pkg string) string {
	if strings.HasPrefix(strings.TrimSpace(block), "package ") {
		return block
	}
	var imports []string
	for name, path := range knownImports {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(block) {
			imports = append(imports, fmt.Sprintf("%s %q", name, path))
		}
	}
	sort.Strings(imports)
	return "package " + pkg + "\n\nimport (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\n" + block
}

func TestReadmeCodeCompiles(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fence.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 3 {
		t.Fatalf("found %d Go blocks in the README; the fence pattern is broken", len(blocks))
	}
	// Inside the module so that imports resolve; "_" keeps ./... from seeing it.
	root, err := os.MkdirTemp(".", "_build")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	var dirs []string
	for i, b := range blocks {
		dir := filepath.Join(root, fmt.Sprintf("block%02d", i+1))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "block.go"), []byte(asFile(b[1], fmt.Sprintf("block%02d", i+1))), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, "./"+dir)
	}
	out, err := exec.Command("go", append([]string{"vet"}, dirs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("README code does not compile (blocks are numbered from the top):\n%s", out)
	}
}
