// Command crosstalk-mcp is a Model Context Protocol server that lets separate
// AI contexts talk in groups stored as SQLite databases on one machine's disk.
//
// With no arguments it serves MCP over stdio; "crosstalk-mcp observe" serves a
// local dashboard, read-only for group data; the Storage view's two
// maintenance actions write the audit database (observe_page.go).
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// version is the release reported by --version and serverInfo.version,
// stamped with -ldflags "-X main.version=1.2.3"; the default is the VERSION
// file's (main_release_test.go keeps the two equal).
var version = "1.2.0"

// compatibility is --version's second line: the Python original's release
// whose wire and disk behaviour this port mirrors, whatever its own version.
const compatibility = "compatible with crosstalk-mcp-server 1.1.10 (Python)"

// usage is printed by --help. Its wording and the observer's options follow
// the original's, so that scripts that grep it keep working; this port's
// commands get one line each, their options being in their own --help.
const usage = `Usage: crosstalk-mcp [COMMAND]

Run without a command to start the stdio MCP server.

Commands:
  serve [--http ADDR]          Serve MCP over stdio (the default) or over HTTP.
  observe [OPTIONS]            Start the local observer dashboard: read-only for
                               group data; the Storage view's two maintenance
                               actions write the audit database.
    --silent                   Do not open a browser automatically.
    --port PORT                Bind exactly this loopback port.
    --poll-interval SECONDS    Set the observer refresh interval (default: 0.5).
    --groups-dir PATH          Read group databases from this directory.
    --demo [--keep]            Show demo agents' data in a temporary directory.
  hook --client NAME           Answer a client's hook with the member's mail.
  wait                         Wake an idle Claude Code session when mail comes.
  hooks install|uninstall      Add or remove Crosstalk's hooks in a client.
  status                       Show a member's groups, mail and wakeup states.
  tokens add|list              Make or list per-agent tokens for serve --http.
  doctor [--repair]            List (or move aside) unusable group files.

Options:
  -h, --help                   Show this help message.
  --version                    Show the installed Crosstalk version.

Run 'crosstalk-mcp COMMAND --help' for a command's options.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches the command line and returns the process exit status, so
// that tests can drive the CLI without a subprocess.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return runStdio(stdin, stdout, stderr)
	}
	switch args[0] {
	case "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "--version":
		fmt.Fprintln(stdout, version)
		fmt.Fprintln(stdout, compatibility)
		return 0
	case "serve":
		return runServe(args[1:], stdin, stdout, stderr)
	case "observe":
		return runObserve(args[1:], stdout, stderr, groupsDirFromEnv)
	case "doctor":
		return runDoctor(args[1:], stdout, stderr)
	case "hook":
		return runHook(args[1:], stdin, stdout, stderr)
	case "wait":
		return runWait(args[1:], stdin, stdout, stderr)
	case "status":
		return runStatus(args[1:], stdout, stderr)
	case "hooks":
		return runHooksInstall(args[1:], stdout, stderr)
	case "tokens":
		return runTokens(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "Unknown command: %s; run 'crosstalk-mcp --help'\n", args[0])
	return 2
}

// groupsDirFromEnv returns CROSSTALK_GROUPS_DIR, or ~/.cache/crosstalk when it
// is unset or empty.
func groupsDirFromEnv() (string, error) {
	if dir := os.Getenv("CROSSTALK_GROUPS_DIR"); dir != "" {
		return dir, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find home directory for the default groups directory: %w", err)
	}
	return filepath.Join(home, ".cache", "crosstalk"), nil
}

// serving is what both transports open before they serve.
type serving struct {
	store *store // its dir is the groups directory
	audit *auditLog
	cfg   serverConfig // every session's
}

// openServing does the start-up the stdio and HTTP servers share. Like the
// original it refuses a bad setting before any storage exists. On failure
// it has said why on stderr and returns nil and the exit status.
func openServing(stderr io.Writer) (*serving, int) {
	log.SetOutput(stderr)
	log.SetFlags(0)
	log.SetPrefix("crosstalk-mcp: ")
	fail := func(err error, status int) (*serving, int) {
		fmt.Fprintln(stderr, err)
		return nil, status
	}
	auditCfg, err := auditConfigFromEnv(os.LookupEnv)
	if err != nil {
		return fail(err, 2)
	}
	cfg := newServerConfig(version, pollInterval(os.Getenv("CROSSTALK_POLL_INTERVAL_SECONDS")))
	cfg.channels = channelsEnabled(os.Getenv("CROSSTALK_CHANNELS"))
	if cfg.maxMessageBytes, err = messageLimitFromEnv(); err != nil {
		return fail(err, 2)
	}
	dir, err := groupsDirFromEnv()
	if err != nil {
		return fail(err, 1)
	}
	if warning := networkFSWarning(dir, os.Getenv); warning != "" {
		fmt.Fprintln(stderr, "crosstalk-mcp: "+warning)
	}
	st, err := newStore(dir, time.Now)
	if err != nil {
		return fail(err, 1)
	}
	return &serving{store: st, audit: openAuditLog(dir, auditCfg, stderr, time.Now), cfg: cfg}, 0
}

// close stops the audit writer, writing what it has queued, then closes
// the store; a server calls it after its own goroutines have stopped.
func (sv *serving) close() {
	sv.audit.close()
	sv.store.close()
}

// stopSignals returns a channel that receives SIGINT and SIGTERM. It is never
// stopped, so that a repeated signal during the orderly end, up to main's
// os.Exit, is absorbed instead of killing the process before its exit status.
func stopSignals() <-chan os.Signal {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	return sig
}

// runStdio serves MCP over stdio until stdin closes or SIGINT or SIGTERM
// arrives, then exits 0 with queued audit rows written.
func runStdio(stdin io.Reader, stdout, stderr io.Writer) int {
	sig := stopSignals()
	sv, status := openServing(stderr)
	if sv == nil {
		return status
	}
	defer sv.close()
	os.Remove(clientEndMarker(sv.store.dir, os.Getppid()))
	defer endClientWaiters(sv.store.dir, os.Getppid())
	// A pinned member stops a per-agent server speaking for another.
	if pinned := os.Getenv("CROSSTALK_CONTEXT_ID"); pinned != "" {
		sv.cfg.speaksFor = pinnedSpeaker(pinned)
	}
	s := newServer(sv.store, stdout, sv.cfg)
	defer s.subs.close()
	if fileEventsEnabled(os.Getenv("CROSSTALK_FILE_EVENTS")) {
		s.changes = newChangeWatcher(sv.store.dir)
		defer s.changes.close()
		s.subs.followWatch(s.changes)
	}
	sv.audit.attach(s)
	// A blocking stdin read cannot be interrupted, so serving runs aside.
	// SIGPIPE is received, not fatal: a write to a closed stdout fails with
	// EPIPE and ends the session below.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	done := make(chan error, 1)
	go func() { done <- s.serve(stdin) }()
	select {
	case err := <-done:
		if errors.Is(err, errOutputClosed) {
			fmt.Fprintf(stderr, "crosstalk-mcp: ending the session, the client closed stdout: %v\n", err)
			return exitClientGone
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	case <-sig:
		joinWithin(busyRetryWindow+time.Second, s.stop) // a write to a stdout nobody reads never returns
		joinWithin(time.Second, s.inflight.close)       // waits are answered and audited before the store closes
	}
	return 0
}
