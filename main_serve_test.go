package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeSelfSignedCert writes a certificate for 127.0.0.1 and localhost and
// its key into dir, and returns their paths and a pool trusting the
// certificate.
func writeSelfSignedCert(t *testing.T, dir string) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "crosstalk-mcp test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

// TestServeHTTPOverTLS runs `serve --http` with a certificate: MCP works
// over HTTPS for a client trusting it, a client that does not trust it or
// speaks plain HTTP gets nowhere, and no clear-text warning is printed.
func TestServeHTTPOverTLS(t *testing.T) {
	certPath, keyPath, pool := writeSelfSignedCert(t, t.TempDir())
	_, endpoint, stderr := startHTTPProcess(t, t.TempDir(), "--tls-cert", certPath, "--tls-key", keyPath)
	if !strings.HasPrefix(endpoint, "https://127.0.0.1:") {
		t.Fatalf("announced endpoint: got %q; want https://127.0.0.1:PORT/mcp", endpoint)
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	c := &httpTestClient{tb: t, url: endpoint, hc: trusting}
	c.initialize()
	var g struct {
		GroupID string `json:"group_id"`
	}
	c.ok("create_group", map[string]any{"context_id": "ctx-a", "name": "over tls"}, &g)
	if g.GroupID == "" {
		t.Fatal("create_group over HTTPS: got no group id")
	}
	resp := c.do(t.Context(), http.MethodPost, c.request("ping", nil), nil)
	resp.Body.Close()
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("ping over HTTPS: got TLS state %+v; want TLS 1.2 or newer", resp.TLS)
	}

	// The server's certificate is what the trust check is about: the
	// system roots do not vouch for it.
	untrusting := &httpTestClient{tb: t, url: endpoint, hc: &http.Client{Timeout: 30 * time.Second}}
	if _, err := untrusting.tryDo(t.Context(), http.MethodPost, c.request("ping", nil), nil); err == nil {
		t.Error("client without the certificate in its roots: got a response; want a verification error")
	}
	plain := &httpTestClient{tb: t, url: strings.Replace(endpoint, "https://", "http://", 1), session: c.session}
	if resp, err := plain.tryDo(t.Context(), http.MethodPost, c.request("ping", nil), nil); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP to the TLS port: got 200; want no MCP answer")
		}
	}
	if strings.Contains(stderr.String(), "without TLS") {
		t.Errorf("stderr: got %q; want no clear-text warning with TLS on", stderr.String())
	}
}

// TestServeHTTPRefusesToStart checks that serve --http fails before it
// announces a URL when its certificate or token file cannot be read or
// CROSSTALK_MAX_MESSAGE_BYTES is invalid (validated at start-up, as the
// stdio server does), with the exit status and error each calls for.
func TestServeHTTPRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name       string
		args, env  []string
		wantExit   int
		wantStderr string
	}{
		{"unreadable certificate", []string{"--tls-cert", filepath.Join(dir, "missing.pem"), "--tls-key", filepath.Join(dir, "missing.key")},
			nil, 1, "TLS certificate"},
		{"unreadable token file", []string{"--token-file", filepath.Join(dir, "missing.token")}, nil, 1, "read token file"},
		{"unreadable tokens file", []string{"--tokens-file", filepath.Join(dir, "missing.tokens")}, nil, 1, "missing.tokens"},
		{"invalid message limit", nil, []string{"CROSSTALK_MAX_MESSAGE_BYTES=lots"}, 2, "CROSSTALK_MAX_MESSAGE_BYTES"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A server that went on would serve until killed; the deadline
			// is generous, for a loaded machine, and ends that case.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, builtBinary(t), append([]string{"serve", "--http", "127.0.0.1:0"}, c.args...)...)
			cmd.Env = append(append(os.Environ(), "CROSSTALK_GROUPS_DIR="+dir), c.env...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != c.wantExit {
				t.Errorf("exit: got %v; want status %d", err, c.wantExit)
			}
			if stdout.Len() != 0 || !strings.Contains(stderr.String(), c.wantStderr) {
				t.Errorf("got stdout %q, stderr %q; want no URL and an error naming %s", stdout.String(), stderr.String(), c.wantStderr)
			}
		})
	}
}

func TestCleartextWarning(t *testing.T) {
	tests := []struct {
		addr string
		tls  bool
		warn bool
	}{
		{"127.0.0.1:8808", false, false},
		{"127.0.0.2:8808", false, false}, // all of 127/8 is this machine
		{"localhost:8808", false, false},
		{"[::1]:8808", false, false},
		{"0.0.0.0:8808", false, true},
		{":8808", false, true}, // every interface
		{"[::]:8808", false, true},
		{"192.0.2.10:8808", false, true},
		{"192.0.2.10:8808", true, false},
		{"0.0.0.0:8808", true, false},
	}
	for _, tt := range tests {
		opts := serveOptions{httpAddr: tt.addr}
		if tt.tls {
			opts.tlsCert, opts.tlsKey = "c.pem", "k.pem"
		}
		if got := cleartextWarning(opts); (got != "") != tt.warn {
			t.Errorf("cleartextWarning(%s, tls=%v): got %q; want a warning: %v", tt.addr, tt.tls, got, tt.warn)
		}
	}
}

// TestServeHTTPAllInterfacesWarnsOnce binds every interface with a token
// and no TLS: exactly one warning goes to stderr, and the server answers
// (reached over loopback only) with the token and refuses without it.
func TestServeHTTPAllInterfacesWarnsOnce(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, endpoint, stderr := startHTTPProcess(t, t.TempDir(), "--http", "0.0.0.0:0", "--token-file", tokenFile)
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("announced endpoint %q: %v", endpoint, err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	c := &httpTestClient{tb: t, url: u.String(), token: "s3cret-token"}
	c.initialize()
	if msg := c.call("ping", nil); msg.Error != nil {
		t.Errorf("ping with the token: got %+v; want a result", msg.Error)
	}
	anon := &httpTestClient{tb: t, url: u.String()}
	if code, _ := statusOf(anon, http.MethodPost, string(anon.request("ping", nil)), nil); code != http.StatusUnauthorized {
		t.Errorf("ping without the token: got %d; want 401", code)
	}
	if n := strings.Count(stderr.String(), "without TLS"); n != 1 {
		t.Errorf("clear-text warnings on stderr: got %d in %q; want exactly 1", n, stderr.String())
	}
}

// runCLI runs the command line args and returns its exit status and output.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestTokensAddList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	code, token, stderr := runCLI("tokens", "add", "alice", "--context-id", "alice", "--context-id", "ci-*", "--tokens-file", path)
	token = strings.TrimSpace(token)
	if code != 0 || len(token) != 43 || stderr != "" {
		t.Fatalf("add: got %d, %q, %q; want 0, a 43-character token, nothing", code, token, stderr)
	}
	if code, _, _ := runCLI("tokens", "add", "bob", "--context-id", "bob", "--tokens-file", path); code != 0 {
		t.Fatalf("second add: got %d; want 0", code)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("tokens file: got %v, %v; want mode 0600", info, err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), token) {
		t.Errorf("tokens file holds the token:\n%s", data)
	}
	tokens, err := newTokenTable("", path)
	if err != nil {
		t.Fatal(err)
	}
	if tok := tokens.authenticate("Bearer " + token); tok == nil || tok.name != "alice" {
		t.Errorf("the printed token: got %v; want alice's", tok)
	}
	code, list, _ := runCLI("tokens", "list", "--tokens-file", path)
	if want := "alice alice ci-*\nbob bob\n"; code != 0 || list != want {
		t.Errorf("list: got %d, %q; want 0, %q", code, list, want)
	}
	if strings.Contains(list, "sha256") || strings.Contains(list, token) {
		t.Errorf("list shows a token or digest: %q", list)
	}
	tests := []struct {
		args []string
		code int
		want string // in stderr, or stdout for --help
	}{
		{[]string{"add", "alice", "--context-id", "a", "--tokens-file", path}, 1, "alice repeats an earlier line's NAME"},
		{[]string{"add", "carol", "--context-id", "a b", "--tokens-file", path}, 1, "without blanks"},
		{[]string{"add", "carol", "--context-id", "a*b", "--tokens-file", path}, 1, "only at its end"},
		{[]string{"add", "carol", "--tokens-file", path}, 2, "at least one --context-id"},
		{[]string{"add", "--context-id", "a", "--tokens-file", path}, 2, "add needs NAME"},
		{[]string{"add", "carol", "--context-id", "a"}, 2, "--tokens-file is required"},
		{[]string{"remove"}, 2, "expected add or list"},
		{[]string{"--help"}, 0, "usage: crosstalk-mcp tokens add"},
		{[]string{"add", "--help"}, 0, "usage: crosstalk-mcp tokens add"},
		{[]string{"list", "-h"}, 0, "usage: crosstalk-mcp tokens add"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(append([]string{"tokens"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stdout+stderr, tt.want) {
				t.Errorf("got %d, %q, %q; want %d and %q", code, stdout, stderr, tt.code, tt.want)
			}
		})
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
		t.Errorf("refused adds changed the file:\n%s", after)
	}
}

// TestServeHTTPBodyDeadline sends a request whose declared body never
// comes, to a server that refuses it unread for want of a token: the 401
// still arrives, after the read deadline, instead of the connection being
// held for ever. A stream outlives that deadline.
func TestServeHTTPBodyDeadline(t *testing.T) {
	tokens, err := newTokenTable("secret", "")
	if err != nil {
		t.Fatal(err)
	}
	st := newTestStore(t, t.TempDir())
	gid := newTestGroup(t, st, "g", "a")
	tr := newHTTPTransport(st, newServerConfig(version, 20*time.Millisecond), nil, withDefaultLimits(httpLimits{writeTimeout: 300 * time.Millisecond}))
	tr.tokens = tokens
	defer tr.close()
	srv, _, err := newHTTPServer(serveOptions{httpAddr: "127.0.0.1:0", tokens: tokens}, tr)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a refused request whose body never comes: got %v, %v; want 401 within 5 s", resp, err)
	}

	// A wait longer than the read deadline is still answered on its stream.
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/mcp", strings.NewReader(body))
	req.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer secret"}}
	init, err := http.DefaultClient.Do(req)
	if err != nil || init.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %v, %v", init, err)
	}
	init.Body.Close()
	post := func(body string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/mcp", strings.NewReader(body))
		req.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer secret"},
			"Mcp-Session-Id": {init.Header.Get("Mcp-Session-Id")}, "Mcp-Protocol-Version": {"2025-06-18"}}
		return http.DefaultClient.Do(req)
	}
	if resp, err := post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %v, %v", resp, err)
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_for_messages","arguments":{"group_id":"` + gid + `","context_id":"a","name":"a","timeout_seconds":1,"caller_name":"a"}}}`
	resp, err = post(call)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(answer), `"id": 2`) || !strings.Contains(string(answer), `{\"messages\": []}`) {
		t.Errorf("wait_for_messages past the read deadline: got %q, %v; want its answer", answer, err)
	}
}
