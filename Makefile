# Build, test and release tasks for crosstalk-mcp. `make test` is the full
# check CI runs; every step stops the run at its first failure and says which.

# VERSION is stamped into the binary; override with `make VERSION=1.2.3`.
# Without a VERSION file or a tag it is the original's release this port
# mirrors (not a commit hash: serverInfo.version should stay a release).
VERSION ?= $(shell cat VERSION 2>/dev/null || git describe --tags 2>/dev/null | sed 's/^v//' | grep . || echo 1.1.10)
LDFLAGS := -s -w -X main.version=$(VERSION)
BINARY := crosstalk-mcp
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64

# fail prints which step broke; used as `command || $(call fail,step)`.
fail = { echo "FAIL: $(1)" >&2; exit 1; }
# need stops the run when program $(1) is missing, saying what to install.
need = command -v $(1) >/dev/null || $(call fail,$(1) is not installed: $(2))
NODE_HINT := install Node.js 20 or later with npm (Debian: apt-get install nodejs npm)

.PHONY: build test vet fmt lint tools race cross conformance conformance-http bench clean
# The test steps must run in order: later ones are slower and assume earlier ones passed.
.NOTPARALLEL:

build:
	@echo "==> go build -o $(BINARY) (version $(VERSION))"
	@go build -trimpath -ldflags "$(LDFLAGS)" -o $(BINARY) . || $(call fail,go build)

test: vet fmt lint race cross conformance conformance-http
	@echo "PASS: make test (vet, gofmt, lint, race tests, cross build, conformance, HTTP conformance)"

vet:
	@$(call need,go,install Go $$(sed -n 's/^go //p' go.mod) or later from https://go.dev/dl)
	@echo "==> go vet ./..."
	@go vet ./... || $(call fail,go vet ./...)

fmt:
	@echo "==> gofmt -l ."
	@unformatted=$$(gofmt -l .) || $(call fail,gofmt); \
	if [ -n "$$unformatted" ]; then \
		echo "FAIL: gofmt: these files are not formatted (run gofmt -w):" >&2; \
		echo "$$unformatted" >&2; exit 1; \
	fi

# lint runs staticcheck and deadcode at pinned versions with `go run`, which
# fetches them into the module cache on first use and keeps them out of
# go.mod. deadcode looks from main without the tests, so a function only
# tests call is reported: production code should not carry test helpers.
STATICCHECK := go run honnef.co/go/tools/cmd/staticcheck@v0.8.2
DEADCODE := go run golang.org/x/tools/cmd/deadcode@v0.52.0
lint:
	@echo "==> staticcheck ./..."
	@$(STATICCHECK) ./... || $(call fail,staticcheck ./...)
	@echo "==> deadcode ."
	@dead=$$($(DEADCODE) .) || $(call fail,deadcode .); \
	if [ -n "$$dead" ]; then \
		echo "FAIL: deadcode: these functions are unreachable from main:" >&2; \
		echo "$$dead" >&2; exit 1; \
	fi

# The race suite took 222 s on one CI machine and 475 s on another of the
# same size; go test's default 10-minute timeout would kill it on a slower
# one, so it gets 25 minutes (CI's whole run has 90).
race: conformance/axe/node_modules/.package-lock.json
	@$(call need,$$(go env CC),go test -race needs cgo and a C compiler; install gcc (Debian: apt-get install gcc libc6-dev))
	@[ "$$CROSSTALK_BROWSER_TEST" != 1 ] || { command -v chromium || command -v chromium-browser || command -v google-chrome \
		|| command -v google-chrome-stable; } >/dev/null || $(call fail,CROSSTALK_BROWSER_TEST=1 needs Chromium; install chromium (Debian: apt-get install chromium) or unset it)
	@echo "==> CGO_ENABLED=1 go test -race -count=1 -timeout 25m ./..."
	@CGO_ENABLED=1 go test -race -count=1 -timeout 25m ./... || $(call fail,go test -race ./...)

cross:
	@mkdir -p dist
	@for platform in $(PLATFORMS); do \
		os=$${platform%/*}; arch=$${platform#*/}; ext=""; \
		if [ "$$os" = windows ]; then ext=.exe; fi; \
		out=dist/$(BINARY)-$$os-$$arch$$ext; \
		echo "==> $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags "$(LDFLAGS)" -o $$out . \
			|| $(call fail,cross build $$os/$$arch); \
	done

# npm ci rewrites node_modules/.package-lock.json, so this reinstalls only
# when the lock file changes.
conformance/node_modules/.package-lock.json: conformance/package-lock.json
	@$(call need,node,$(NODE_HINT))
	@$(call need,npm,$(NODE_HINT))
	@node -e 'process.exit(process.versions.node.split(".")[0] >= 20 ? 0 : 1)' \
		|| $(call fail,Node.js 20 or later is needed; node --version says $$(node --version))
	@echo "==> npm ci --prefix conformance"
	@npm ci --prefix conformance --no-audit --no-fund || $(call fail,npm ci --prefix conformance)

# axe-core, served to the page under test by the dashboard browser test.
conformance/axe/node_modules/.package-lock.json: conformance/axe/package-lock.json
	@$(call need,npm,$(NODE_HINT))
	@echo "==> npm ci --prefix conformance/axe"
	@npm ci --prefix conformance/axe --no-audit --no-fund || $(call fail,npm ci --prefix conformance/axe)

conformance: build conformance/node_modules/.package-lock.json
	@echo "==> conformance check with the MCP TypeScript SDK client"
	@CROSSTALK_BIN="$(CURDIR)/$(BINARY)" CROSSTALK_EXPECT_VERSION="$(VERSION)" node conformance/client.mjs || $(call fail,conformance (node conformance/client.mjs))
	@echo "==> conformance check per protocol revision with the MCP TypeScript SDK v2 client"
	@CROSSTALK_BIN="$(CURDIR)/$(BINARY)" node conformance/revisions.mjs || $(call fail,conformance (node conformance/revisions.mjs))
	@echo "==> conformance check with the MCP Go SDK client (its own module, conformance/go)"
	@cd conformance/go && CROSSTALK_BIN="$(CURDIR)/$(BINARY)" go run . || $(call fail,conformance (conformance/go))

# The official conformance suite needs Node 22; conformance/http pins it as
# the `node` npm package, so the machine's own Node version does not matter.
conformance/http/node_modules/.package-lock.json: conformance/http/package-lock.json
	@$(call need,npm,$(NODE_HINT))
	@echo "==> npm ci --prefix conformance/http"
	@npm ci --prefix conformance/http --no-audit --no-fund || $(call fail,npm ci --prefix conformance/http)

conformance-http: build conformance/node_modules/.package-lock.json conformance/http/node_modules/.package-lock.json
	@echo "==> official MCP conformance suite against serve --http (Node 22 from conformance/http)"
	@CROSSTALK_BIN="$(CURDIR)/$(BINARY)" conformance/http/node_modules/node/bin/node conformance/http/run.mjs \
		|| $(call fail,conformance-http (conformance/http/run.mjs; baseline conformance/http/baseline.yml))
	@echo "==> TypeScript SDK v2 clients, one agent over HTTP and one over stdio, every revision"
	@CROSSTALK_BIN="$(CURDIR)/$(BINARY)" CROSSTALK_TRANSPORT=http node conformance/revisions.mjs \
		|| $(call fail,conformance-http (CROSSTALK_TRANSPORT=http node conformance/revisions.mjs))
	@echo "==> Go SDK clients, the recipient over HTTP (2026-07-28)"
	@cd conformance/go && CROSSTALK_BIN="$(CURDIR)/$(BINARY)" CROSSTALK_TRANSPORT=http go run . \
		|| $(call fail,conformance-http (CROSSTALK_TRANSPORT=http conformance/go))

# tools fetches the pinned linters lint runs, without running them.
tools:
	@$(STATICCHECK) -version >/dev/null || $(call fail,go run staticcheck)
	@$(DEADCODE) -h 2>/dev/null || $(call fail,go run deadcode)

bench:
	go test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf $(BINARY) $(BINARY).exe dist
