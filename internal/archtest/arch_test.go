// Package archtest checks the project's import boundaries.
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/brokerguard/brokerguard"

// The core must stay free of third-party code: users pay for nothing they do not use.
func TestCoreImportsOnlyStandardLibraryAndModule(t *testing.T) {
	for _, pkg := range []string{"breaker", "breaker/backend", "admission", "transport", "registry"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep != module && !strings.HasPrefix(dep, module+"/") {
				t.Errorf("%s depends on %s, outside the standard library and this module", pkg, dep)
			}
		}
	}
}

// breaker and admission depend on nothing of this module but internal helpers (and
// never on each other; breaker/backend is breaker's plumbing for backends); transport only on breaker; registry composes them; no package
// outside integration builds integration code in.
func TestLayering(t *testing.T) {
	allowed := map[string][]string{
		"breaker":   {"internal/", "breaker/internal/"},
		"admission": {"internal/"},
		"transport": {"breaker"},
		"registry":  {"breaker", "breaker/backend", "admission", "transport", "internal/"},
		// What only authors of circuits need of breaker, lent through breaker/internal/link.
		"breaker/backend": {"breaker", "breaker/internal/", "internal/"},
		// Shared backends plug into the registry through a plain function value and
		// need not import it; their state machine is sharedstate's.
		"breaker/sharedstate": {"breaker", "breaker/backend", "internal/"},
		"breaker/dynamo":      {"breaker", "breaker/sharedstate", "transport"},
		"breaker/filestate":   {"breaker", "breaker/sharedstate", "transport"},
		"breaker/redis":       {"breaker", "breaker/sharedstate", "transport"},
	}
	for pkg, ok := range allowed {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, module+"/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
	imports:
		for _, imp := range strings.Fields(string(out)) {
			rel, mine := strings.CutPrefix(imp, module+"/")
			if !mine {
				continue
			}
			for _, prefix := range ok {
				if rel == prefix || strings.HasSuffix(prefix, "/") && strings.HasPrefix(rel, prefix) {
					continue imports
				}
			}
			t.Errorf("%s imports %s", pkg, imp)
		}
	}
	// Only what a package builds into users' binaries counts: tests (the demo's, for
	// one) may use the harness.
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		if strings.HasPrefix(pkg, module+"/integration") {
			continue
		}
		if strings.Contains(imports, module+"/integration") {
			t.Errorf("%s imports the integration packages", pkg)
		}
	}
}

// The sarama and Watermill adapters are modules of their own (docs/contributing.md) so
// that their clients never join the root module's graph.
func TestRootModuleGraphLeavesOutTheAdapterModulesClients(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "all").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		mod, _, _ := strings.Cut(line, " ")
		for _, banned := range []string{"github.com/IBM/sarama", "github.com/ThreeDotsLabs/", module + "/kgoguard", module + "/saramaguard", module + "/watermillguard"} {
			if strings.HasPrefix(mod, banned) {
				t.Errorf("the root module's graph holds %s", mod)
			}
		}
	}
}
