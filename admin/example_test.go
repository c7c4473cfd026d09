package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The service mounts the handler on its own mux, under a prefix of its choosing.
func Example() {
	journal := admin.NewJournal(0) // the timeline's memory
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}},
		registry.WithObserver(journal.Record))
	if err != nil {
		panic(err)
	}
	h, err := admin.New(reg, admin.WithJournal(journal),
		admin.WithMutations("a-long-random-token-from-your-secret-store"),
		admin.WithAudit(func(_ context.Context, e admin.AuditEvent) {
			fmt.Println("audit:", e.Action, e.Destination, e.Status)
		}))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", http.StripPrefix("/admin", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// A publish to kafka:payments fails, so its circuit opens.
	circuit, _ := reg.Circuit(transport.Destination{Broker: "kafka", Name: "payments"})
	p, _ := circuit.Acquire(context.Background())
	p.Complete(breaker.Failure)

	resp, err := http.Get(srv.URL + "/admin/api/circuits")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var list admin.Circuits
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		panic(err)
	}
	for _, c := range list.Circuits {
		fmt.Println(c.Destination, c.State, c.Failures)
	}
	// Output:
	// kafka:payments open 1
}

// A handler reached by a name other than localhost or an IP address must be told the
// name; other hosts get 421 on every route, so a page that rebinds its own name to
// the admin port reads nothing.
func ExampleWithAllowedHosts() {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	if err != nil {
		panic(err)
	}
	h, err := admin.New(reg, admin.WithAllowedHosts("billing.internal", "*.svc.cluster.local"))
	if err != nil {
		panic(err)
	}
	for _, host := range []string{"billing.internal:8080", "billing.default.svc.cluster.local", "attacker.example"} {
		r := httptest.NewRequest("GET", "/api/circuits", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(host, w.Code)
	}
	// Output:
	// billing.internal:8080 200
	// billing.default.svc.cluster.local 200
	// attacker.example 421
}
