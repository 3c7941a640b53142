package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
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
	tokensFile     string      // --tokens-file: per-agent tokens
	tokens         *tokenTable // the shared token and tokensFile's, once loaded
	tlsCert        string
	tlsKey         string
	allowedOrigins []string
}

const serveHelp = `usage: crosstalk-mcp serve [--http ADDR] [--token-file PATH] [--tokens-file PATH] [--tls-cert PATH --tls-key PATH] [--allow-origin ORIGIN]...

Serve MCP over stdio (the default) or, with --http, over the Streamable HTTP
transport so that agents on other machines can reach this machine's groups.

options:
  --http ADDR           listen on ADDR (host:port; a bare port binds 127.0.0.1)
  --token-file PATH     require "Authorization: Bearer <token>" with the token in
                        PATH (or CROSSTALK_HTTP_TOKEN); required off loopback
  --tokens-file PATH    accept per-agent tokens instead or as well, each speaking
                        for its context ids only (see 'crosstalk-mcp tokens')
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
	fs.StringVar(&opts.tokensFile, "tokens-file", "", "")
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
	switch {
	case opts.httpAddr == "" && (*tokenFile != "" || opts.tokensFile != "" || opts.tlsCert != "" || opts.allowedOrigins != nil):
		return opts, errors.New("--token-file, --tokens-file, --tls-* and --allow-origin need --http: a stdio server has one client")
	case opts.httpAddr == "":
		return opts, nil
	case !isLoopbackAddr(opts.httpAddr) && opts.token == "" && opts.tokensFile == "":
		return opts, fmt.Errorf("refusing to listen on %s without a token: a non-loopback address lets anyone "+
			"who can reach it read and write every group. Give --token-file PATH, --tokens-file PATH or set CROSSTALK_HTTP_TOKEN "+
			"(or bind 127.0.0.1)", opts.httpAddr)
	}
	tokens, err := newTokenTable(opts.token, opts.tokensFile)
	opts.tokens = tokens
	return opts, err
}

// runServe runs "crosstalk-mcp serve": stdio without --http.
func runServe(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	opts, err := parseServeOptions(args, os.Getenv)
	if pathErr := (*fs.PathError)(nil); errors.As(err, &pathErr) { // a file it names, not the command line
		return commandStatus("serve", err, stderr)
	}
	if err != nil {
		return commandExit("serve", serveHelp, err, stdout, stderr)
	}
	if opts.httpAddr == "" {
		return runStdio(stdin, stdout, stderr)
	}
	return runHTTPServer(opts, stdout, stderr)
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
	sv.audit.readNamesFrom(sv.store)
	t := newHTTPTransport(sv.store, sv.cfg, sv.audit, defaultHTTPLimits)
	defer t.close()
	if t.tokens = opts.tokens; opts.tokensFile != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		t.followTokens(hup)
	}
	if fileEventsEnabled(os.Getenv("CROSSTALK_FILE_EVENTS")) {
		t.changes = newChangeWatcher(sv.store.dir)
		defer t.changes.close()
	}
	ln, err := net.Listen("tcp", opts.httpAddr)
	if err != nil {
		return commandStatus("serve", fmt.Errorf("listen on %s: %w", opts.httpAddr, err), stderr)
	}
	srv, scheme, err := newHTTPServer(opts, t)
	if err != nil {
		return commandStatus("serve", err, stderr)
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
	case err := <-done: // never nil: Serve returns only on failure
		return commandStatus("serve", err, stderr)
	case <-sig:
	}
	// Streams never finish on their own: end the sessions before Shutdown.
	t.close()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	return 0
}

// newHTTPServer returns the http.Server for t behind its guard, and its
// URL scheme: "https" when opts name a certificate, which it loads now so
// that a bad file fails the command before the server announces itself.
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
		Handler: newHTTPGuard(isLoopbackAddr(opts.httpAddr), t.tokens, opts.allowedOrigins, t),
		// A client cannot pin a connection before it has said anything,
		// nor with a body it never sends, even to a request refused
		// unread (net/http drains it before the reply). net/http lifts
		// the read deadline once a body is read, and writes have
		// per-request deadlines, as SSE streams outlive any whole-response
		// timeout.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       t.limits.writeTimeout,
		// An idle connection holds a descriptor; two minutes outlasts an
		// agent's pause between calls.
		IdleTimeout: 2 * time.Minute,
		// Room for long bearer tokens, and a bound on what we buffer.
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

const tokensHelp = `usage: crosstalk-mcp tokens add NAME --context-id PATTERN... --tokens-file PATH
       crosstalk-mcp tokens list --tokens-file PATH

The per-agent tokens of 'serve --http --tokens-file PATH'. add prints a new
token for NAME once and appends NAME, the token's SHA-256 and the patterns to
PATH (created with mode 0600); list prints names and patterns, never a token.

options:
  --context-id PATTERN  a context_id the token may speak for, exact or a prefix
                        ending in '*' (repeatable; add needs at least one)
  --tokens-file PATH    the tokens file
`

// runTokens runs "crosstalk-mcp tokens add|list".
func runTokens(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "add" && args[0] != "list") {
		err := errors.New("expected add or list")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			err = flag.ErrHelp
		}
		return commandExit("tokens", tokensHelp, err, stdout, stderr)
	}
	command, rest := "tokens "+args[0], args[1:]
	var name string
	if args[0] == "add" && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	path := fs.String("tokens-file", "", "")
	var patterns []string
	fs.Func("context-id", "", func(v string) error {
		patterns = append(patterns, v)
		return nil
	})
	err := parseFlags(fs, rest)
	switch {
	case err != nil:
	case *path == "":
		err = errors.New("--tokens-file is required")
	case args[0] == "add" && (name == "" || len(patterns) == 0):
		err = errors.New("add needs NAME and at least one --context-id")
	}
	if err != nil {
		return commandExit(command, tokensHelp, err, stdout, stderr)
	}
	if args[0] == "list" {
		err = listTokens(*path, stdout)
	} else {
		err = addToken(*path, name, patterns, stdout)
	}
	return commandStatus(command, err, stderr)
}

// listTokens prints each agent's name and patterns.
func listTokens(path string, stdout io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	tokens, err := parseTokens(data)
	for _, tok := range tokens {
		fmt.Fprintf(stdout, "%s %s\n", tok.name, strings.Join(tok.patterns, " "))
	}
	return err
}

// addToken makes a token of 32 random bytes (base64url, 43 characters),
// appends its line to the tokens file and prints the token once. The file
// with the line is first parsed as the server does, so add never leaves a
// file the server refuses.
func addToken(path, name string, patterns []string, stdout io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var raw [32]byte
	rand.Read(raw[:])
	token := base64.RawURLEncoding.EncodeToString(raw[:])
	text := tokenLine(name, token, patterns)
	if len(strings.Fields(text)) != 2+len(patterns) {
		return errors.New("NAME and each --context-id must be non-empty and without blanks")
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		text = "\n" + text
	}
	if _, err := parseTokens(append(data, text...)); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if err = errors.Join(err, f.Close()); err == nil {
		fmt.Fprintln(stdout, token)
	}
	return err
}
