package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// serving is what both transports open before they serve: the groups
// directory, its store and the audit log.
type serving struct {
	dir   string
	store *store
	audit *auditLog
	cfg   serverConfig // every session's
}

// openServing does the start-up the stdio and HTTP servers share: the log
// prefix, the audit and message-limit settings (like the original, a bad
// setting is refused before any storage exists), the groups directory and
// its network-filesystem warning, the store and the audit log. On failure
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
	audit, err := openAuditLog(dir, auditCfg, stderr)
	if err != nil {
		st.close()
		return fail(err, 1)
	}
	return &serving{dir: dir, store: st, audit: audit, cfg: cfg}, 0
}

// close stops the audit writer, writing what it has queued, and then
// closes the store; a server calls it after its own goroutines have
// stopped, so that nothing is audited or stored after it.
func (sv *serving) close() {
	sv.audit.close()
	sv.store.close()
}

// stopSignals returns a channel that receives SIGINT and SIGTERM from now
// until the process exits. It is never stopped: a signal during start-up
// ends the session as soon as it starts, one while an earlier signal's
// shutdown writes audit rows is absorbed, and so is one in the moment
// between the last deferred close and main's os.Exit, where restoring the
// default action would let a repeated SIGTERM kill the process after its
// orderly end but before its exit status.
func stopSignals() <-chan os.Signal {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	return sig
}

// runStdio serves MCP over stdio until stdin closes, then exits 0. A client
// that stops the server with SIGINT or SIGTERM gets the same orderly end,
// so queued audit rows are still written.
func runStdio(stdin io.Reader, stdout, stderr io.Writer) int {
	sig := stopSignals()
	sv, status := openServing(stderr)
	if sv == nil {
		return status
	}
	defer sv.close()
	defer endClientWaiters(sv.dir, os.Getppid())
	// An environment that names the member pins this server to it, so a
	// client spawning one server per agent cannot have it speak for another.
	if pinned := os.Getenv("CROSSTALK_CONTEXT_ID"); pinned != "" {
		sv.cfg.speaksFor = pinnedSpeaker(pinned)
	}
	s := newServer(sv.store, stdout, sv.cfg)
	defer s.subs.close()
	if fileEventsEnabled(os.Getenv("CROSSTALK_FILE_EVENTS")) {
		s.changes = newChangeWatcher(sv.dir)
		defer s.changes.close()
		s.subs.followWatch(s.changes)
	}
	sv.audit.attach(s)
	// A read from a blocking stdin cannot be interrupted, so serving runs
	// aside. SIGPIPE is received rather than left to kill the process, so
	// that a write to a closed stdout fails with EPIPE and ends the session
	// below.
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
		s.stop()
	}
	return 0
}
