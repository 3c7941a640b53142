package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// serveOptions is the validated command line of "crosstalk-mcp serve".
type serveOptions struct {
	httpAddr       string // "" serves stdio
	token          string
	tlsCert        string
	tlsKey         string
	allowedOrigins []string
}

const serveHelp = `usage: crosstalk-mcp serve [--http ADDR] [--token-file PATH] [--tls-cert PATH --tls-key PATH] [--allow-origin ORIGIN]...

Serve MCP over stdio (the default) or, with --http, over the Streamable HTTP
transport so that agents on other machines can reach this machine's groups.

options:
  --http ADDR           listen on ADDR (host:port; a bare port binds 127.0.0.1)
  --token-file PATH     require "Authorization: Bearer <token>" with the token in
                        PATH (or CROSSTALK_HTTP_TOKEN); required off loopback
  --tls-cert PATH       serve HTTPS with this certificate (PEM) ...
  --tls-key PATH        ... and this private key (PEM)
  --allow-origin ORIGIN also accept browser requests from ORIGIN
                        (loopback origins are always accepted)
`

// parseServeOptions reads the serve command line; the token comes from
// --token-file, else from CROSSTALK_HTTP_TOKEN.
func parseServeOptions(args []string, getenv func(string) string) (serveOptions, error) {
	var opts serveOptions
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Func("http", "", func(v string) (err error) {
		opts.httpAddr, err = normalizeHTTPAddr(v)
		return err
	})
	tokenFile := fs.String("token-file", "", "")
	fs.StringVar(&opts.tlsCert, "tls-cert", "", "")
	fs.StringVar(&opts.tlsKey, "tls-key", "", "")
	fs.Func("allow-origin", "", func(v string) error {
		opts.allowedOrigins = append(opts.allowedOrigins, v)
		return nil
	})
	if err := parseFlags(fs, args); err != nil {
		return opts, err
	}
	if (opts.tlsCert == "") != (opts.tlsKey == "") {
		return opts, errors.New("--tls-cert and --tls-key must be given together")
	}
	opts.token = strings.TrimSpace(getenv("CROSSTALK_HTTP_TOKEN"))
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return opts, fmt.Errorf("read token file: %w", err)
		}
		if opts.token = strings.TrimSpace(string(b)); opts.token == "" {
			return opts, fmt.Errorf("token file %s is empty", *tokenFile)
		}
	}
	if opts.httpAddr == "" {
		return opts, nil
	}
	if !isLoopbackAddr(opts.httpAddr) && opts.token == "" {
		return opts, fmt.Errorf("refusing to listen on %s without a token: a non-loopback address lets anyone "+
			"who can reach it read and write every group. Give --token-file PATH or set CROSSTALK_HTTP_TOKEN "+
			"(or bind 127.0.0.1)", opts.httpAddr)
	}
	return opts, nil
}

// runServe runs "crosstalk-mcp serve": stdio without --http.
func runServe(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	opts, err := parseServeOptions(args, os.Getenv)
	if err != nil {
		return commandExit("serve", serveHelp, err, stdout, stderr)
	}
	if opts.httpAddr == "" {
		return runStdio(stdin, stdout, stderr)
	}
	return runHTTPServer(opts, stdout, stderr)
}

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
	auditCfg, err := auditConfigFromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, 2
	}
	cfg := newServerConfig(version, pollInterval(os.Getenv("CROSSTALK_POLL_INTERVAL_SECONDS")))
	if cfg.maxMessageBytes, err = messageLimitFromEnv(); err != nil {
		fmt.Fprintln(stderr, err)
		return nil, 2
	}
	dir, err := groupsDirFromEnv()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, 1
	}
	if warning := networkFSWarning(dir, os.Getenv); warning != "" {
		fmt.Fprintln(stderr, "crosstalk-mcp: "+warning)
	}
	st, err := newStore(dir)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, 1
	}
	audit, err := openAuditLog(dir, auditCfg, stderr)
	if err != nil {
		st.close()
		fmt.Fprintln(stderr, err)
		return nil, 1
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

// runStdio serves MCP over stdio until stdin closes, then exits 0.
//
// It runs three goroutines besides its own, each with a known end:
//   - serve, reading stdin: it returns at EOF or a read or write error. On
//     SIGINT or SIGTERM it is left blocked in its read and the process exits
//     (a read from stdin cannot be interrupted).
//   - the subscription poller (subscriptions.run): stopped by the deferred
//     s.subs.close, which waits for it at most one second.
//   - the audit writer (auditLog.writeRows), when the audit log is on: stopped
//     and joined by the deferred sv.close, after the poller.
func runStdio(stdin io.Reader, stdout, stderr io.Writer) int {
	// A client that stops the server with SIGINT or SIGTERM gets the same
	// orderly end as on EOF, so queued audit rows are still written.
	sig := stopSignals()
	sv, status := openServing(stderr)
	if sv == nil {
		return status
	}
	defer sv.close()
	defer endClientWaiters(sv.dir, os.Getppid())
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

// runHTTPServer serves the Streamable HTTP transport until SIGINT or
// SIGTERM, then lets open requests finish for up to five seconds.
func runHTTPServer(opts serveOptions, stdout, stderr io.Writer) int {
	sig := stopSignals()
	sv, status := openServing(stderr)
	if sv == nil {
		return status
	}
	defer sv.close()
	sv.audit.attach(&server{store: sv.store})
	t := newHTTPTransport(sv.store, sv.cfg, sv.audit, defaultHTTPLimits)
	defer t.close()
	if fileEventsEnabled(os.Getenv("CROSSTALK_FILE_EVENTS")) {
		t.changes = newChangeWatcher(sv.dir)
		defer t.changes.close()
	}
	ln, err := net.Listen("tcp", opts.httpAddr)
	if err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp serve: listen on %s: %v\n", opts.httpAddr, err)
		return 1
	}
	srv, scheme, err := newHTTPServer(opts, t)
	if err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp serve: %v\n", err)
		return 1
	}
	if warning := cleartextWarning(opts); warning != "" {
		fmt.Fprintln(stderr, "crosstalk-mcp: warning: "+warning)
	}
	fmt.Fprintf(stdout, "%s://%s%s\n", scheme, ln.Addr(), httpEndpoint)
	done := make(chan error, 1)
	go func() {
		if opts.tlsCert != "" {
			done <- srv.ServeTLS(ln, "", "")
		} else {
			done <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-done:
		fmt.Fprintf(stderr, "crosstalk-mcp serve: %v\n", err)
		return 1
	case <-sig:
	}
	// Streams never finish on their own: end the sessions first so that
	// Shutdown waits only for ordinary requests, five seconds at most.
	t.close()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	return 0
}

// newHTTPServer returns the http.Server for t behind its guard, and the
// URL scheme it serves: "https" when opts name a certificate, which it
// loads now, so that a bad file fails the command instead of a server
// that announced itself.
func newHTTPServer(opts serveOptions, t *httpTransport) (*http.Server, string, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	scheme := "http"
	if opts.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(opts.tlsCert, opts.tlsKey)
		if err != nil {
			return nil, "", fmt.Errorf("TLS certificate: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
		scheme = "https"
	}
	return &http.Server{
		Handler: newHTTPGuard(isLoopbackAddr(opts.httpAddr), opts.token, opts.allowedOrigins, t),
		// The header timeout stops a client from pinning a connection
		// before it has said anything; bodies and writes have their own
		// per-request deadlines (httpLimits.writeTimeout), since SSE
		// streams must outlive any whole-response timeout.
		ReadHeaderTimeout: 10 * time.Second,
		// Idle keep-alive connections each hold a file descriptor; two
		// minutes outlasts an agent's pause between calls, and a client
		// reconnects transparently after it.
		IdleTimeout: 2 * time.Minute,
		// MCP needs a handful of short headers; 64 KiB leaves room for
		// long bearer tokens and bounds what a client can make us buffer.
		MaxHeaderBytes: 64 << 10,
		TLSConfig:      tlsConfig,
		ErrorLog:       log.New(io.Discard, "", 0),
	}, scheme, nil
}

// cleartextWarning is the warning for serving without TLS off loopback,
// or "" when TLS is on or only this machine can connect.
func cleartextWarning(opts serveOptions) string {
	if opts.tlsCert != "" || isLoopbackAddr(opts.httpAddr) {
		return ""
	}
	return fmt.Sprintf("serving %s without TLS: the bearer token and every message cross the network "+
		"in clear text; use --tls-cert and --tls-key", opts.httpAddr)
}
