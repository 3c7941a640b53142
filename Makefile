# Build, test and release tasks for crosstalk-mcp. `make test` is the full
# check CI runs; every step stops the run at its first failure and says which.

# VERSION is the release stamped into the binary, from the VERSION file;
# override with `make release VERSION=1.2.3`. (It is a release, never a
# commit hash: serverInfo.version should stay one.)
VERSION ?= $(shell cat VERSION)
LDFLAGS := -s -w -X main.version=$(VERSION)
BINARY := crosstalk-mcp

# fail prints which step broke; used as `command || $(call fail,step)`.
fail = { echo "FAIL: $(1)" >&2; exit 1; }
# need stops the run when program $(1) is missing, saying what to install.
need = command -v $(1) >/dev/null || $(call fail,$(1) is not installed: $(2))
NODE_HINT := install Node.js 20 or later with npm (Debian: apt-get install nodejs npm)

.PHONY: build test vet fmt lint tools race cross release release-check conformance conformance-http conformance-clients bench clean
# The test steps must run in order: later ones are slower and assume earlier ones passed.
.NOTPARALLEL:

build:
	@echo "==> go build -o $(BINARY) (version $(VERSION))"
	@go build -trimpath -ldflags "$(LDFLAGS)" -o $(BINARY) . || $(call fail,go build)

test: vet fmt lint release-check race conformance conformance-http conformance-clients
	@echo "PASS: make test (vet, gofmt, lint, reproducible release, race tests, conformance, HTTP conformance, real clients)"

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

# release writes dist/ for VERSION with scripts/release.sh: for linux,
# darwin, windows and freebsd on amd64 and arm64 a static binary (dist/bin),
# an archive with LICENSE and README.md (.zip for Windows, .tar.gz
# otherwise), an MCPB bundle for Linux, macOS and Windows, SHA256SUMS, and
# server.json with the bundles' checksums, which it also copies over the
# top-level server.json so that the registry entry committed with a release
# names that release's files. Only the Go toolchain and scripts/pack (its own
# module, standard library only) are used.
release:
	@scripts/release.sh $(VERSION) dist || $(call fail,release (scripts/release.sh))
	@cp dist/server.json server.json

# cross builds the release's files, binaries in dist/bin/crosstalk-mcp-OS-ARCH,
# without touching the top-level server.json.
cross:
	@scripts/release.sh $(VERSION) dist || $(call fail,cross (scripts/release.sh))

# release-check builds the release twice, from this checkout into dist/ and
# from a copy elsewhere at a later time, and compares every file byte for
# byte; then linux/amd64 once more with an empty GOCACHE (the second build
# shares the first one's cache, so only the third shows that a binary does not
# depend on what the cache held). It leaves dist/ built, which the bundle and
# release tests in main_release_test.go need, so it runs before race. It
# leaves the top-level server.json alone. Measured on a shared 2-core
# machine: the whole release took 374 s from an empty cache (every platform
# compiled) and 20 s from a warm one; release-check took 91 s with a warm
# cache, 48 s of it the empty-cache linux/amd64 build. In CI the first build
# starts cold, as the old six cross-builds did.
release-check:
	@scripts/release-check.sh $(VERSION) || $(call fail,release-check (scripts/release-check.sh))

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

# conformance-clients runs the real Claude Code and Codex CLIs, pinned in
# conformance/clients/package.json, against a fake model API on loopback,
# with the hooks and MCP server configured as a user would: proof that mail
# reaches the model exactly once. Its own Go module, standard library only;
# the only network it needs is npm ci.
conformance/clients/node_modules/.package-lock.json: conformance/clients/package-lock.json
	@$(call need,npm,$(NODE_HINT))
	@echo "==> npm ci --prefix conformance/clients"
	@npm ci --prefix conformance/clients --no-audit --no-fund || $(call fail,npm ci --prefix conformance/clients)

conformance-clients: build conformance/clients/node_modules/.package-lock.json
	@echo "==> real agent clients against a fake model (conformance/clients)"
	@cd conformance/clients && CROSSTALK_BIN="$(CURDIR)/$(BINARY)" go test -count=1 -v -timeout 6m . \
		|| $(call fail,conformance-clients (conformance/clients))

# tools fetches the pinned linters lint runs, without running them.
tools:
	@$(STATICCHECK) -version >/dev/null || $(call fail,go run staticcheck)
	@$(DEADCODE) -h 2>/dev/null || $(call fail,go run deadcode)

bench:
	go test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf $(BINARY) $(BINARY).exe dist
