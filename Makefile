# Every target a person runs is the one CI runs (.ci/run calls `make test`).
GO ?= go
# The race detector is always on: the library is about concurrency.
TESTFLAGS ?= -race -count=1 -timeout 20m
# Modules of their own (see docs/contributing.md): the benchmarks against other libraries,
# the browser test, and the adapters whose clients users should not all download.
MODULES := bench admin/browsertest kgoguard saramaguard watermillguard natsguard

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## Install and start what the integration tests need (idempotent).
	@bash scripts/services.sh

STATICCHECK_VERSION ?= v0.8.2

.PHONY: lint
lint: ## gofmt, go vet, staticcheck and tidy go.mod files, for the root module and the nested ones.
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@sc=$$($(GO) env GOPATH)/bin/staticcheck; $$sc -version 2>/dev/null | grep -q "($(STATICCHECK_VERSION:v%=%))" || \
		$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GO) vet ./... && $(GO) mod tidy -diff && $$($(GO) env GOPATH)/bin/staticcheck ./...
	for m in $(MODULES); do (cd $$m && $(GO) vet ./... && $(GO) mod tidy -diff && $$($(GO) env GOPATH)/bin/staticcheck ./...) || exit 1; done

.PHONY: vulncheck
vulncheck: ## govulncheck every module against an offline copy of the Go vulnerability database.
	@bash scripts/vulncheck.sh $(MODULES)

.PHONY: test
test: services lint vulncheck ## The test command: services, lint, vulncheck, then every test with -race.
	$(GO) test $(TESTFLAGS) ./...
	for m in $(MODULES); do (cd $$m && $(GO) test $(TESTFLAGS) ./...) || exit 1; done

# test-unit leaves out integration/... and internal/harness and points every server address at a closed port
# (outside CI), so that a test elsewhere that would need a server skips at once instead
# of using, starting or installing one. -short skips the few long scenarios.
UNIT_ENV := CI=false AMQP_URL=amqp://guest:guest@127.0.0.1:1/ \
	DATABASE_URL='postgres://postgres@127.0.0.1:1/test?sslmode=disable' \
	REDIS_ADDR=127.0.0.1:1 DYNAMODB_ENDPOINT=http://127.0.0.1:1 KAFKA_BROKERS= SQS_ENDPOINT= \
	NATS_URL=nats://127.0.0.1:1 MYSQL_DSN='root@tcp(127.0.0.1:1)/test'
UNIT_MODULES := kgoguard saramaguard watermillguard natsguard

.PHONY: test-unit
test-unit: ## Tests that need no service (no PostgreSQL, MariaDB, RabbitMQ, Redis, NATS): -race -short; installs and starts nothing.
	env $(UNIT_ENV) $(GO) test $(TESTFLAGS) -short $$($(GO) list ./... | grep -v -e '/integration' -e '/internal/harness')
	for m in $(UNIT_MODULES); do (cd $$m && env $(UNIT_ENV) $(GO) test $(TESTFLAGS) -short ./...) || exit 1; done

.PHONY: metrics
metrics: ## Exported names and test files per package, functions over the bounds, duplicates pairs (internal/archtest keeps the bounds). DIRS=... also counts pairs in each.
	@$(GO) run ./internal/tools/metrics $(DIRS)

.PHONY: mutate
mutate: ## Mutation score of the core packages (docs/history/mutation.md); not in `test`. PKG=registry, SAMPLE=n, SEED=s.
	@GO=$(GO) SAMPLE=$(SAMPLE) SEED=$(SEED) bash scripts/mutate.sh $(PKG)

.PHONY: up
up: ## Start docker-compose.yml's Kafka, RabbitMQ, LocalStack, PostgreSQL and Redis (needs a Docker engine).
	docker compose up -d --wait

.PHONY: down
down: ## Stop them and drop their data.
	docker compose down -v

.PHONY: test-compose
test-compose: ## Run the tests against the docker-compose services (compose.env).
	set -a && . ./compose.env && set +a && $(GO) test $(TESTFLAGS) ./...

.PHONY: soak
soak: ## Outbox soak (minutes; not in `test`): 3 relay processes, kill -9 every 2 s, 2 immediate PostgreSQL restarts, 60,000 rows.
	BROKERGUARD_SOAK=1 $(GO) test -count=1 -timeout 15m -run '^TestSoak$$' -v ./integration/outbox

.PHONY: bench
bench: ## The benchmark table: ours against gobreaker, failsafe-go and an atomic floor, with ratios.
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 -count 3 . | tee /dev/stderr | $(GO) run ./cmd/ratios

.PHONY: chaos
chaos: services ## Faults, load and bad input (integration/chaos); also part of `make test`.
	$(GO) test $(TESTFLAGS) -v ./integration/chaos

.PHONY: fuzz
fuzz: ## Run every fuzz target (found by go test -list, in every module) for FUZZTIME each (default 30s).
	@GO=$(GO) FUZZTIME=$(or $(FUZZTIME),30s) bash scripts/fuzz.sh