// Package readme compiles every Go code block of the repository's README and of every
// docs/*.md file, so that the code a user copies always builds, and keeps the README
// a landing page (at most maxReadmeLines lines).
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
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"log":         "log",
	"http":        "net/http",
	"sql":         "database/sql",
	"os":          "os",
	"time":        "time",
	"admission":   "github.com/brokerguard/brokerguard/admission",
	"breaker":     "github.com/brokerguard/brokerguard/breaker",
	"registry":    "github.com/brokerguard/brokerguard/registry",
	"transport":   "github.com/brokerguard/brokerguard/transport",
	"kafka":       "github.com/brokerguard/brokerguard/kafka",
	"kafkago":     "github.com/segmentio/kafka-go",
	"amqp":        "github.com/brokerguard/brokerguard/amqp",
	"sqs":         "github.com/brokerguard/brokerguard/sqs",
	"awssqs":      "github.com/aws/aws-sdk-go-v2/service/sqs",
	"outbox":      "github.com/brokerguard/brokerguard/outbox",
	"postgres":    "github.com/brokerguard/brokerguard/outbox/postgres",
	"mysql":       "github.com/brokerguard/brokerguard/outbox/mysql",
	"pgxpool":     "github.com/jackc/pgx/v5/pgxpool",
	"pgx":         "github.com/jackc/pgx/v5",
	"dynamo":      "github.com/brokerguard/brokerguard/breaker/dynamo",
	"dynamodb":    "github.com/aws/aws-sdk-go-v2/service/dynamodb",
	"redisstate":  "github.com/brokerguard/brokerguard/breaker/redis",
	"redis":       "github.com/redis/go-redis/v9",
	"telemetry":   "github.com/brokerguard/brokerguard/telemetry",
	"admin":       "github.com/brokerguard/brokerguard/admin",
	"observe":     "github.com/brokerguard/brokerguard/observe",
	"filestate":   "github.com/brokerguard/brokerguard/breaker/filestate",
	"sharedstate": "github.com/brokerguard/brokerguard/breaker/sharedstate",
	"sdkmetric":   "go.opentelemetry.io/otel/sdk/metric",
	"otel":        "go.opentelemetry.io/otel",
	"metric":      "go.opentelemetry.io/otel/sdk/metric",
	"prometheus":  "go.opentelemetry.io/otel/exporters/prometheus",
	"promhttp":    "github.com/prometheus/client_golang/prometheus/promhttp",
}

var lineComment = regexp.MustCompile(`//.*`)

var fence = regexp.MustCompile("(?s)```go\n(.*?)```")

// asFile turns a README block into a compilable file of package pkg.
func asFile(block, pkg string) string {
	if strings.HasPrefix(strings.TrimSpace(block), "package ") {
		return block
	}
	var imports []string
	code := lineComment.ReplaceAllString(block, "") // a name in a comment needs no import
	for name, path := range knownImports {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(code) {
			imports = append(imports, fmt.Sprintf("%s %q", name, path))
		}
	}
	sort.Strings(imports)
	return "package " + pkg + "\n\nimport (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\n" + block
}

// maxReadmeLines keeps the README a landing page; reference material goes to docs/.
const maxReadmeLines = 300

func TestReadmeIsShort(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > maxReadmeLines {
		t.Fatalf("README.md has %d lines, more than %d: move reference material to a docs/ file and link it", n, maxReadmeLines)
	}
}

// docFiles are the Markdown files whose Go blocks must compile: the README and docs/*.md.
func docFiles(t *testing.T) []string {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, docs...)
}

func TestReadmeCodeCompiles(t *testing.T) {
	type block struct{ file, code string }
	var blocks []block
	for _, f := range docFiles(t) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		found := fence.FindAllStringSubmatch(string(text), -1)
		if f == "../../README.md" && len(found) < 3 {
			t.Fatalf("found %d Go blocks in the README; the fence pattern is broken", len(found))
		}
		for _, b := range found {
			blocks = append(blocks, block{filepath.Base(f), b[1]})
		}
	}
	// Inside the module so that imports resolve; "_" keeps ./... from seeing it.
	root, err := os.MkdirTemp(".", "_build")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	var dirs []string
	names := map[string]string{}
	for i, b := range blocks {
		pkg := fmt.Sprintf("block%02d", i+1)
		dir := filepath.Join(root, pkg)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "block.go"), []byte(asFile(b.code, pkg)), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, "./"+dir)
		names[pkg] = b.file
	}
	out, err := exec.Command("go", append([]string{"vet"}, dirs...)...).CombinedOutput()
	if err != nil {
		var where []string
		for _, pkg := range sortedKeys(names) {
			where = append(where, pkg+" = "+names[pkg])
		}
		t.Fatalf("Go code in the docs does not compile (blocks numbered from the top of each file, files in order):\n%s\n%s", out, strings.Join(where, ", "))
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
